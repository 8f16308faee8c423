package traces

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/klauspost/compress/flate"
	"github.com/klauspost/compress/gzip"

	"github.com/gpualloc/gpualloc/snapshot"
)

// ErrNotTrace reports input that is not a trace in any format that [Open]
// and [NewReader] know, or, for a format that recognised the input at first
// sight, input that turns out not to be in that format (a CSV file whose
// first line names an op column but is no header). Errors wrap it, so that
// a caller can tell "not a trace" from a broken trace with errors.Is.
var ErrNotTrace = errors.New("not a gpualloc trace")

// A ParseError reports bad input at a position of a trace. Its message has
// the form "NAME:LINE: message", or "NAME: message" when Line is 0.
type ParseError struct {
	Name string // the trace's name, as given to NewReader or Open
	Line int64  // 1-based line number, counting every line; 0 for the whole file
	Msg  string
	Err  error // the cause, if any: ErrNotTrace, io.ErrUnexpectedEOF, a gzip or I/O error
}

func (e *ParseError) Error() string {
	if e.Line > 0 {
		return e.Name + ":" + strconv.FormatInt(e.Line, 10) + ": " + e.Msg
	}
	return e.Name + ": " + e.Msg
}

func (e *ParseError) Unwrap() error { return e.Err }

// Options control a reader of any format.
type Options struct {
	// Lenient skips a bad event instead of stopping at it: the reader counts
	// it (see [FileReader].Skipped) and goes on with the next record, as if
	// the record were not there. Errors in the structure of the input (a bad
	// header, a truncated or corrupt gzip stream, a line too long, an I/O
	// error) still end the trace.
	Lenient bool
	// TempDir is the directory where a reader that needs a temporary file
	// makes it ("" for the system's, TMPDIR): a long PyTorch snapshot
	// (see snapshot.ReadOptions.TempDir).
	TempDir string
	// Stacks keeps the stacks that a PyTorch snapshot records: its events
	// carry their allocation's stack (Event.Stack), and its reader is a
	// [StackReporter]. Without it the snapshot is read without them, as
	// the replays need none.
	Stacks bool
}

// A StackReporter is a reader whose events carry stacks (Event.Stack):
// Stacks returns the frames and the stacks that Event.Stack indexes, as
// [snapshot.Snapshot.Frames] and [snapshot.Snapshot.Stacks] (stack 0 is
// the empty one). A reader that wraps another passes them on.
type StackReporter interface {
	Stacks() ([]snapshot.Frame, [][]int32)
}

// StacksOf returns the frames and stacks of r when it is a
// [StackReporter], else nil.
func StacksOf(r any) ([]snapshot.Frame, [][]int32) {
	if sr, ok := r.(StackReporter); ok {
		return sr.Stacks()
	}
	return nil, nil
}

// A FileReader is a [Reader] of a trace file in any format that [Open] and
// [NewReader] detect. Besides the events, it tells which format it read
// and what it skipped, and it describes the trace as native columns, so that
// a trace converted to the native format keeps what its format records.
type FileReader interface {
	Reader
	// Name returns the trace's name, as used in errors.
	Name() string
	// Format returns the name of the trace's format: "native CSV",
	// "RMM log", "MiniMalloc CSV", "PyTorch snapshot".
	Format() string
	// MidRun reports whether the trace is a window of a running program
	// rather than a whole run: a PyTorch memory snapshot records the
	// history up to the moment it was taken, so the allocations live at
	// its end (weights, optimizer state, activations in flight) were in
	// use then, not leaked. Live allocations at the end of a trace in any
	// other format were never freed.
	MidRun() bool
	// Columns returns the native columns that hold what the trace records,
	// op and id first among them: the columns of a conversion to the
	// native format.
	Columns() []Column
	// HasTime reports whether the events have times; without them, every
	// event's TimeUS is [NoTime].
	HasTime() bool
	// Skipped returns the number of bad events skipped so far in lenient
	// mode, and FirstSkipped the error of the first of them, or nil.
	Skipped() int64
	FirstSkipped() error
	// AllocFailures returns the number of failed allocations read so far,
	// in the formats that record them (RMM's "allocate failure"); they are
	// not events.
	AllocFailures() int64
	// Close releases the reader's resources, and closes the file if the
	// reader came from Open.
	Close() error
}

// A formatReader is a FileReader that a format makes: a decoder of the
// format on a checker.
type formatReader interface {
	FileReader
	core() *checker
}

// A format is a trace format that Open detects from content.
type format struct {
	name  string                                                               // "native CSV", "PyTorch snapshot", "RMM log", "MiniMalloc CSV"
	sniff func(head []byte) bool                                               // true if head (the first up to 4 KiB, decompressed) looks like this format
	open  func(src io.Reader, name string, opts Options) (formatReader, error) // src is the text, from its beginning
}

// sniffLen is the length of the head of the input that formats sniff.
const sniffLen = 4 << 10

var formats []format

// registerFormat adds a format to those that Open detects. Formats are tried
// in the order they were registered: the native CSV format first, then those
// that register from init in their files. It panics on an empty or
// duplicate name or a missing function.
func registerFormat(f format) {
	if f.name == "" || f.sniff == nil || f.open == nil {
		panic("traces: registerFormat of an incomplete format")
	}
	for _, g := range formats {
		if g.name == f.name {
			panic("traces: format " + f.name + " registered twice")
		}
	}
	formats = append(formats, f)
}

// The native format is registered when the package's variables are
// initialised, before any init function runs, so that it comes first.
var _ = func() bool {
	registerFormat(format{name: nativeFormat, sniff: sniffNative, open: func(src io.Reader, name string, opts Options) (formatReader, error) {
		return newCSVReader(src, name, opts)
	}})
	return true
}()

const nativeFormat = "native CSV"

// formatNames returns the names of the formats that [Open] detects, in the order
// it tries them.
func formatNames() []string {
	names := make([]string, len(formats))
	for i, f := range formats {
		names[i] = f.name
	}
	return names
}

// NewReader returns a reader of the trace that src holds, in whichever
// format its content matches, named name in errors. Input compressed with
// gzip (recognised by its first bytes) is decompressed first; each format
// then looks at the first 4 KiB of the text, in the order of [Formats], and
// the first that recognises them reads the trace. Input that no format
// recognises gives a [*ParseError] wrapping [ErrNotTrace] that lists the
// formats tried. The reader does not close src.
func NewReader(src io.Reader, name string, opts Options) (FileReader, error) {
	return newReader(src, name, opts)
}

func newReader(src io.Reader, name string, opts Options) (formatReader, error) {
	head := make([]byte, sniffLen)
	n, err := io.ReadFull(src, head)
	if err != nil && err != io.EOF && err != io.ErrUnexpectedEOF {
		return nil, &ParseError{Name: name, Msg: "read: " + err.Error(), Err: err}
	}
	head = head[:n]
	text := io.MultiReader(bytes.NewReader(head), src)
	if n >= 2 && head[0] == 0x1f && head[1] == 0x8b {
		// A trace in memory (a bundled one) is decompressed from its
		// bytes.Reader, rewound past the bytes sniffed, which the
		// decompressor reads in place, without a buffer of its own;
		// any other source goes through one.
		if br, ok := src.(*bytes.Reader); ok {
			if _, err := br.Seek(int64(-n), io.SeekCurrent); err == nil {
				text = br
			}
		}
		zr, err := gzip.NewReader(text)
		if err != nil {
			return nil, (&gzipText{}).wrap(err).parseError(name, 0)
		}
		gz := &gzipText{zr: zr}
		head = make([]byte, sniffLen)
		n, err := io.ReadFull(gz, head)
		if err != nil && err != io.EOF && err != io.ErrUnexpectedEOF {
			return nil, sourceError(name, 0, err)
		}
		head = head[:n]
		text = io.MultiReader(bytes.NewReader(head), gz)
	}
	for _, f := range formats {
		if !f.sniff(head) {
			continue
		}
		r, err := f.open(text, name, opts)
		if err != nil {
			return nil, err
		}
		return r, nil
	}
	if why := zipArchive(head); why != "" {
		return nil, &ParseError{Name: name, Msg: why, Err: ErrNotTrace}
	}
	if line, n, why := nearNative(head); why != "" {
		return nil, &ParseError{Name: name, Line: n, Msg: nativeFormat + ": " + why + "; the header: " + printable(line), Err: ErrNotTrace}
	}
	msg := "not a trace in any known format (" + strings.Join(formatNames(), ", ") + ")"
	if len(head) == 0 {
		msg = "empty input: " + msg
	}
	return nil, &ParseError{Name: name, Msg: msg, Err: ErrNotTrace}
}

// snapshotHowTo says how PyTorch writes the snapshot this package reads.
const snapshotHowTo = "a PyTorch memory snapshot is the pickle that torch.cuda.memory._dump_snapshot(\"snapshot.pickle\") writes after torch.cuda.memory._record_memory_history()"

// zipArchive says what a zip archive is and what to give instead, or ""
// when head is no zip archive. torch.save writes its files as zip
// archives whose entries are NAME/data.pkl (the pickled object), NAME/data/0
// (tensors' storage) and more (torch/serialization.py, _save): a model or
// tensors, which hold no allocations.
func zipArchive(head []byte) string {
	if !bytes.HasPrefix(head, []byte("PK\x03\x04")) {
		return ""
	}
	// The first entry's name follows its local header: 30 bytes, of which
	// bytes 26-27 give the name's length.
	entry := ""
	if len(head) >= 30 {
		if n := int(head[26]) | int(head[27])<<8; 30+n <= len(head) {
			entry = string(head[30 : 30+n])
		}
	}
	if strings.HasSuffix(entry, "data.pkl") || bytes.Contains(head, []byte("/data.pkl")) || bytes.Contains(head, []byte(".data/version")) {
		return "a zip archive that torch.save wrote (" + printable([]byte(entry)) + "), not a trace: " + snapshotHowTo
	}
	what := "a zip archive"
	if entry != "" {
		what += " (its first entry: " + printable([]byte(entry)) + ")"
	}
	return what + ", not a trace: unzip it and give the trace it holds (" + snapshotHowTo + ")"
}

// nearNative looks at input that no format recognised for a first line that
// is nearly a native header, and says what keeps it from being one: fields
// separated by ';' or tabs, names in quotes, or no op column among names the
// format knows (a renamed column). It returns the line, its number and the
// reason, or no reason.
func nearNative(head []byte) (line []byte, n int64, why string) {
	line, n = firstLineAt(head)
	if line == nil {
		return nil, 0, ""
	}
	for _, sep := range []string{";", "\t"} {
		for f := range strings.SplitSeq(string(line), sep) {
			if strings.EqualFold(strings.Trim(strings.TrimSpace(f), `"'`), "op") && strings.Contains(string(line), sep) {
				name := map[string]string{";": "';'", "\t": "tabs"}[sep]
				return line, n, "fields separated by " + name + ", want ','"
			}
		}
	}
	known, quoted := 0, false
	for f := range strings.SplitSeq(string(line), ",") {
		f = strings.TrimSpace(f)
		if u := strings.Trim(f, `"'`); u != f {
			quoted = true
			f = u
		}
		if strings.EqualFold(f, "op") && quoted {
			return line, n, "quoted names and fields are not read: write them without quotes"
		}
		switch {
		case columnByName(f) != 0:
			known++
		case strings.EqualFold(f, "lower"), strings.EqualFold(f, "upper"):
			return nil, 0, "" // nearer MiniMalloc's buffers than events
		}
	}
	if known >= 2 || known >= 1 && strings.Contains(string(line), ",") {
		return line, n, "header has no op column (known columns: " + knownColumns + ")"
	}
	return nil, 0, ""
}

// printable returns b as it is when it is printable ASCII, else quoted.
func printable(b []byte) string {
	for _, c := range b {
		if c < ' ' || c > '~' {
			return strconv.Quote(string(b))
		}
	}
	return string(b)
}

// firstLineAt is firstLine, skipping comments, with the line's number.
func firstLineAt(head []byte) ([]byte, int64) {
	l, ok := firstLine(head, true)
	if !ok {
		return nil, 0
	}
	// The line's number: the lines before it, each ending in '\n'.
	i := bytes.Index(head, l)
	return l, int64(bytes.Count(head[:i], []byte("\n"))) + 1
}

// gzipText is the text of a gzip stream. It counts the bytes of text it has
// given, and turns the errors of the stream into a *textError that says
// where the stream broke.
type gzipText struct {
	zr *gzip.Reader
	n  int64
}

func (g *gzipText) Read(p []byte) (int, error) {
	n, err := g.zr.Read(p)
	g.n += int64(n)
	if err != nil && err != io.EOF {
		return n, g.wrap(err)
	}
	return n, err
}

// A textError is an error of the source of a trace's text, with the
// message a ParseError gives it.
type textError struct {
	msg string
	err error
}

func (e *textError) Error() string { return e.msg }
func (e *textError) Unwrap() error { return e.err }

func (e *textError) parseError(name string, line int64) *ParseError {
	return &ParseError{Name: name, Line: line, Msg: e.msg, Err: e.err}
}

func (g *gzipText) wrap(err error) *textError {
	var corrupt flate.CorruptInputError
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
		return &textError{fmt.Sprintf("truncated gzip stream (it ends after %d bytes of text)", g.n), err}
	case errors.Is(err, gzip.ErrHeader), errors.Is(err, gzip.ErrChecksum), errors.As(err, &corrupt):
		return &textError{fmt.Sprintf("corrupt gzip stream after %d bytes of text: %v", g.n, err), err}
	}
	return &textError{"read: " + err.Error(), err}
}

// sourceError describes an error from a trace's source at a line (0 for
// the whole file): "NAME:LINE: truncated gzip stream (...)", or
// "NAME:LINE: read: ..." for an I/O error.
func sourceError(name string, line int64, err error) *ParseError {
	var te *textError
	if errors.As(err, &te) {
		return te.parseError(name, line)
	}
	return &ParseError{Name: name, Line: line, Msg: "read: " + err.Error(), Err: err}
}

// firstLine returns the first line of head that is neither blank nor, if
// comments is true, a comment, without its line ending and the spaces
// around it; ok is false if head holds no complete such line (a line that
// ends head counts as complete when head is shorter than the sniffing
// length: it is the whole input).
func firstLine(head []byte, comments bool) (line []byte, ok bool) {
	head = bytes.TrimPrefix(head, []byte("\xef\xbb\xbf"))
	for len(head) > 0 {
		i := bytes.IndexByte(head, '\n')
		var l []byte
		if i < 0 {
			if len(head) >= sniffLen-3 {
				return nil, false
			}
			l, head = head, nil
		} else {
			l, head = head[:i], head[i+1:]
		}
		l = trimSpace(bytes.TrimSuffix(l, []byte("\r")))
		if len(l) == 0 || comments && l[0] == '#' {
			continue
		}
		return l, true
	}
	return nil, false
}

// sniffNative recognises the native format: the first line that is not a
// comment is a header naming an op column. A head that is all comments is
// taken as native too, for the native reader to decide.
func sniffNative(head []byte) bool {
	line, ok := firstLine(head, true)
	if !ok {
		rest := bytes.TrimLeft(bytes.TrimPrefix(head, []byte("\xef\xbb\xbf")), " \t\r\n")
		return len(head) >= sniffLen-3 && len(rest) > 0 && rest[0] == '#'
	}
	for f := range bytes.SplitSeq(line, []byte(",")) {
		if bytes.EqualFold(trimSpace(f), []byte("op")) {
			return true
		}
	}
	return false
}
