package traces

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"strconv"
	"strings"
)

// MaxLineBytes is the length of the longest line a [CSVReader] accepts,
// line ending included; a longer line is an error.
const MaxLineBytes = 64 << 10

// Sizes of a CSVReader's buffer. It starts small, for short traces and
// readers that only look at the header, and grows to maxBuf, room for the
// longest line and a byte for the newline a reader adds to a last line that
// has none, as soon as the input turns out to be longer.
const (
	minBuf = 4<<10 + 1
	maxBuf = MaxLineBytes + 1
)

// pad is the number of bytes at the end of a reader's buffer that hold no
// input, so that the parser may read 8 bytes from any byte of a line (and
// the 17th byte of a number) without checking where the line ends.
const pad = 16

// ErrNotTrace reports input that is not a trace in the format a reader
// reads: for [NewReader], input whose first line that is not a comment is
// not a header naming an op column (an empty file, an image, another tool's
// CSV); for [Open] and [NewAutoReader], input that no known format
// recognises. Errors wrap it, so that a caller trying several formats in
// turn can tell "not mine" from a broken trace with errors.Is.
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

// Options control a [CSVReader].
type Options struct {
	// Lenient skips a bad event instead of stopping at it: the reader counts
	// it (see [CSVReader.Skipped]) and goes on with the next line, as if the
	// line were not there. Errors in the structure of the input (a bad
	// header, a truncated or corrupt gzip stream, a line too long, an I/O
	// error) still end the trace.
	Lenient bool
}

// errQuiet stands for the errors of events skipped after the first in
// lenient mode, which nobody reads: formatting them would only cost time.
var errQuiet = errors.New("bad event")

// A CSVReader reads a trace in the native format (see the package
// documentation), plain or gzip-compressed, and checks it as it goes. It
// implements [Reader].
//
// A CSVReader reads its input in blocks and parses each line in place. Its
// memory is a buffer of at most 64 KiB plus a table of the live allocations,
// so it depends on the peak number of live allocations, never on the length
// of the trace. Reading an event allocates nothing, except for the copy it
// keeps of an id that is not a number (see [IDKey]) while that id is live.
type CSVReader struct {
	name string
	opts Options

	src    io.Reader       // the text: the input, or its decompressed form
	gz     *gzip.Reader    // non-nil for gzip input
	buf    []byte          // input buffer
	pos    int             // start of the next line in buf
	end    int             // end of the last complete line in buf
	w      int             // end of the data in buf
	off    int64           // offset in the text of buf[0]
	srcErr error           // error from src, after which it gives nothing more
	err    error           // the error that ended the trace, or nil
	line   int64           // lines read so far
	cols   []Column        // the columns, in header order
	fields [maxCols][]byte // scratch for splitting a line, slow path

	hasTime  bool
	lastTime int64

	rec record
	ev  Event

	live      liveTable
	tokens    map[string]uint64 // interned ids of live allocations
	nextToken uint64            // counts allocations of interned ids
	freeSlots []int32           // released slots, reused last in, first out
	nslots    int32

	skipped   int64
	firstSkip error

	slowOnly bool // parse every line with parseSlow, for tests
}

var _ FileReader = (*CSVReader)(nil)

// record is what a parsed line adds to its fields, which are in r.ev,
// before its checks against the trace's state.
type record struct {
	tok       []byte // the id, when it is not a number; points into buf
	hasSize   bool   // the fields were not empty
	hasStream bool
	hasDevice bool
}

// NewReader returns a reader of the trace that src holds, named name in
// errors. It reads up to the header: src compressed with gzip (recognised by
// its first bytes, whatever its name) is decompressed; input that is not a
// trace in the native format gives an error wrapping [ErrNotTrace]. The
// reader does not close src.
func NewReader(src io.Reader, name string, opts Options) (*CSVReader, error) {
	r := &CSVReader{
		name:     name,
		opts:     opts,
		src:      src,
		buf:      make([]byte, minBuf+pad),
		lastTime: NoTime,
		tokens:   map[string]uint64{},
	}
	r.live.init(10)
	n, err := io.ReadAtLeast(src, r.buf[:minBuf-1], 2)
	switch {
	case err == io.ErrUnexpectedEOF:
		err = io.EOF
	case err != nil && err != io.EOF:
		return nil, sourceError(name, 0, err)
	}
	if n >= 2 && r.buf[0] == 0x1f && r.buf[1] == 0x8b {
		head := bytes.Clone(r.buf[:n])
		rest := src
		if err != nil {
			rest = eofReader{}
		}
		gz, gerr := gzip.NewReader(io.MultiReader(bytes.NewReader(head), rest))
		if gerr != nil {
			return nil, r.gzipError(gerr, 0)
		}
		r.gz, r.src = gz, gz
	} else {
		r.w = n
		if i := bytes.LastIndexByte(r.buf[:n], '\n'); i >= 0 {
			r.end = i + 1
		}
		r.srcErr = err
	}
	if err := r.readHeader(); err != nil {
		return nil, err
	}
	return r, nil
}

type eofReader struct{}

func (eofReader) Read([]byte) (int, error) { return 0, io.EOF }

// readHeader reads up to the header and parses it.
func (r *CSVReader) readHeader() error {
	for {
		if r.pos >= r.end && !r.fill() {
			if r.err != nil {
				return r.err
			}
			if r.line == 0 {
				return r.notTrace("empty input")
			}
			return r.notTrace("no header line")
		}
		b := r.buf[:r.end]
		i := r.pos + bytes.IndexByte(b[r.pos:], '\n')
		line := b[r.pos:i]
		r.pos = i + 1
		r.line++
		if len(line) >= MaxLineBytes {
			return r.notTrace(tooLongForHeader)
		}
		if r.line == 1 {
			line = bytes.TrimPrefix(line, []byte("\xef\xbb\xbf")) // byte order mark
		}
		line = bytes.TrimSuffix(line, []byte("\r"))
		if len(trimSpace(line)) == 0 || line[0] == '#' {
			continue
		}
		return r.parseHeader(line)
	}
}

const tooLongForHeader = "a line longer than 65536 bytes before any header"

func (r *CSVReader) notTrace(why string) error {
	return &ParseError{Name: r.name, Msg: ErrNotTrace.Error() + " (" + why + ")", Err: ErrNotTrace}
}

func (r *CSVReader) parseHeader(line []byte) error {
	var names []string
	hasOp := false
	for f := range bytes.SplitSeq(line, []byte(",")) {
		s := string(trimSpace(f))
		names = append(names, s)
		hasOp = hasOp || strings.EqualFold(s, "op")
	}
	if !hasOp {
		return r.notTrace("first line is not a header naming an op column")
	}
	var seen [maxCols + 1]bool
	for _, s := range names {
		c := columnByName(s)
		switch {
		case s == "":
			return r.errorAt(r.line, "empty column name in header")
		case c == 0:
			return r.errorAt(r.line, "unknown column %q in header (known: %s)", s, knownColumns)
		case seen[c]:
			return r.errorAt(r.line, "column %q appears twice in header", s)
		}
		seen[c] = true
		r.cols = append(r.cols, c)
	}
	if !seen[ColID] {
		return r.errorAt(r.line, "header has no id column")
	}
	r.hasTime = seen[ColTime]
	return nil
}

// fill makes buf[pos:end] hold at least one complete line, moving the
// incomplete last line to the front of buf and reading more. At the end of
// the input it adds the missing newline of a last line that has none. It
// returns false at the end of the input or on an error, which it stores in
// r.err.
func (r *CSVReader) fill() bool {
	if r.pos > 0 {
		r.w = copy(r.buf, r.buf[r.pos:r.w])
		r.off += int64(r.pos)
		r.pos, r.end = 0, 0
	}
	for empty, grow := 0, true; ; grow = false {
		if r.w >= MaxLineBytes {
			if r.cols == nil {
				r.err = r.notTrace(tooLongForHeader)
			} else {
				r.line++
				r.err = r.errorAt(r.line, "line too long (more than %d bytes)", MaxLineBytes)
			}
			return false
		}
		if r.srcErr != nil {
			if r.srcErr != io.EOF {
				r.line++ // the line being read
				r.err = r.readError(r.srcErr)
				return false
			}
			if r.w == 0 {
				return false
			}
			r.buf[r.w] = '\n'
			r.w++
			r.end = r.w
			return true
		}
		if size := len(r.buf) - pad; size < maxBuf && (grow || r.w == size-1) {
			// More input than the buffer held, or a long line: read
			// larger blocks.
			r.buf = append(r.buf[:r.w], make([]byte, min(4*size, maxBuf)+pad-r.w)...)
		}
		n, err := r.src.Read(r.buf[r.w : len(r.buf)-pad-1])
		if n > 0 {
			if i := bytes.LastIndexByte(r.buf[r.w:r.w+n], '\n'); i >= 0 {
				r.end = r.w + i + 1
			}
			r.w += n
			empty = 0
		} else if err == nil {
			if empty++; empty >= 100 {
				err = io.ErrNoProgress
			}
		}
		if err != nil {
			r.srcErr = err
		}
		if r.end > 0 {
			return true
		}
	}
}

// readError describes an error from the input, at line r.line.
func (r *CSVReader) readError(err error) error {
	if r.gz != nil {
		return r.gzipError(err, r.line)
	}
	return sourceError(r.name, r.line, err)
}

func (r *CSVReader) gzipError(err error, line int64) error {
	var corrupt flate.CorruptInputError
	var msg string
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
		msg = fmt.Sprintf("truncated gzip stream (it ends after %d bytes of text)", r.off+int64(r.w))
	case errors.Is(err, gzip.ErrHeader), errors.Is(err, gzip.ErrChecksum), errors.As(err, &corrupt):
		msg = fmt.Sprintf("corrupt gzip stream after %d bytes of text: %v", r.off+int64(r.w), err)
	default:
		msg = "read: " + err.Error()
	}
	return &ParseError{Name: r.name, Line: line, Msg: msg, Err: err}
}

// Scan advances to the next event, which Event then returns. It returns
// false at the end of the trace or at an error, which Err then returns.
func (r *CSVReader) Scan() bool {
	if r.err != nil {
		return false
	}
	for {
		if r.pos >= r.end && !r.fill() {
			return false
		}
		b := r.buf[:r.end]
		p := r.pos
		r.line++
		// b ends with '\n', so a byte at p that is not '\n' has a byte after it.
		if c := b[p]; c == '#' || c == '\n' || c == '\r' && b[p+1] == '\n' {
			r.pos = p + 1 + bytes.IndexByte(b[p:], '\n')
			if r.pos-p > MaxLineBytes {
				r.err = r.errorAt(r.line, "line too long (more than %d bytes)", MaxLineBytes)
				return false
			}
			continue
		}
		// The fast path takes only lines far shorter than MaxLineBytes.
		next, ok := 0, false
		if !r.slowOnly {
			next, ok = r.parseFast(r.buf, p)
		}
		var err error
		if !ok {
			e := p + bytes.IndexByte(b[p:], '\n')
			if e+1-p > MaxLineBytes {
				r.err = r.errorAt(r.line, "line too long (more than %d bytes)", MaxLineBytes)
				return false
			}
			var blank bool
			blank, err = r.parseSlow(b[p:e])
			next = e + 1
			if blank {
				r.pos = next
				continue
			}
		}
		r.pos = next
		if err == nil {
			err = r.apply()
		}
		if err == nil {
			return true
		}
		if !r.opts.Lenient {
			r.err = err
			return false
		}
		r.skipped++
		if r.firstSkip == nil {
			r.firstSkip = err
		}
	}
}

// parseFast parses the line at buf[p:] into r.ev and r.rec when it has the
// form that writers produce: no spaces, numbers in canonical form of at most
// 16 digits, ids decimal or hexadecimal. It returns the start of the next
// line, or false when the line needs parseSlow.
//
// The line ends with the '\n' at buf[r.end-1], and buf has pad bytes after
// r.end, so that reading 8 bytes at any position of the line stays in buf.
func (r *CSVReader) parseFast(buf []byte, p int) (int, bool) {
	ev, rec := &r.ev, &r.rec
	rec.tok = nil
	rec.hasSize, rec.hasStream, rec.hasDevice = false, false, false
	ev.Stream, ev.Device, ev.TimeUS = 0, 0, NoTime
	last := len(r.cols) - 1
	for i, col := range r.cols {
		switch col {
		case ColOp:
			x := binary.LittleEndian.Uint64(buf[p:])
			if x&0xff_ffff_ffff == 'a'|'l'<<8|'l'<<16|'o'<<24|'c'<<32 {
				ev.Op = OpAlloc
				p += 5
			} else if uint32(x) == 'f'|'r'<<8|'e'<<16|'e'<<24 {
				ev.Op = OpFree
				p += 4
			} else {
				return p, false
			}
		case ColID:
			if buf[p] == '0' && buf[p+1] == 'x' {
				v, n := hexDigits(buf, p+2)
				// 15 digits stay below 2^62; longer ones go the slow way.
				if n == 0 || n > 15 || n > 1 && buf[p+2] == '0' {
					return p, false
				}
				ev.ID = v | idHexTag
				p += 2 + n
			} else {
				v, n := digits8(binary.LittleEndian.Uint64(buf[p:]))
				if n == 8 {
					v, n = digitsMore(buf, p, v)
				}
				if n == 0 || n > 16 || n > 1 && buf[p] == '0' {
					return p, false
				}
				ev.ID = v
				p += n
			}
		default:
			v, n := digits8(binary.LittleEndian.Uint64(buf[p:]))
			if n == 8 {
				v, n = digitsMore(buf, p, v)
			}
			if n > 16 {
				return p, false
			}
			p += n
			switch col {
			case ColSize:
				if n > 0 && v == 0 {
					return p, false
				}
				ev.Size, rec.hasSize = int64(v), n > 0
			case ColStream:
				ev.Stream, rec.hasStream = v, n > 0
			case ColDevice:
				if v > 1<<31-1 {
					return p, false
				}
				ev.Device, rec.hasDevice = int32(v), n > 0
			case ColTime:
				if n == 0 {
					return p, false
				}
				ev.TimeUS = int64(v)
			}
		}
		if i < last {
			if buf[p] != ',' {
				return p, false
			}
			p++
		} else if buf[p] == '\n' {
			p++
		} else if buf[p] == '\r' && buf[p+1] == '\n' {
			p += 2
		} else {
			return p, false
		}
	}
	return p, true
}

// digitsMore returns the value and the number of the decimal digits at
// buf[p:] when the first 8 bytes are digits of value v. A count above 16
// means "more than 16", and then the value is meaningless.
func digitsMore(buf []byte, p int, v uint64) (uint64, int) {
	w, m := digits8(binary.LittleEndian.Uint64(buf[p+8:]))
	if m == 8 && buf[p+16]-'0' <= 9 {
		return 0, 17
	}
	return v*pow10[m] + w, 8 + m
}

var pow10 = [...]uint64{1, 10, 100, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8}

// digits8 returns the value and the number of the decimal digits that begin
// the 8 bytes of x, first byte lowest, with SWAR arithmetic: no branch
// depends on the number of digits.
func digits8(x uint64) (uint64, int) {
	d := x - 0x3030303030303030 // byte values 0..9 for digits
	// A byte that is not a digit gets its top bit set: either it was below
	// '0' and wrapped, or adding 0x76 takes it past 0x7f. Borrows and carries
	// go only towards later bytes, which do not matter.
	nd := (d | (d + 0x7676767676767676)) & 0x8080808080808080
	n := bits.TrailingZeros64(nd) >> 3
	d <<= 8 * (8 - n) // keep the digits, as the top bytes; 0 when n is 0
	d = (d & 0x0f0f0f0f0f0f0f0f) * (10<<8 + 1) >> 8
	d = (d & 0x00ff00ff00ff00ff) * (100<<16 + 1) >> 16
	d = (d & 0x0000ffff0000ffff) * (10000<<32 + 1) >> 32
	return d, n
}

// hexDigits returns the value and the number of the lower-case hexadecimal
// digits at buf[p:], up to 16.
func hexDigits(buf []byte, p int) (uint64, int) {
	var v uint64
	for n := 0; n < 16; n++ {
		c := buf[p+n]
		if d := c - '0'; d <= 9 {
			v = v<<4 | uint64(d)
		} else if d := c - 'a'; d <= 5 {
			v = v<<4 | uint64(d+10)
		} else {
			return v, n
		}
	}
	return v, 16
}

// parseSlow parses line, without its '\n', into r.rec, accepting space
// around fields and reporting what is wrong. It reports whether the line is
// blank.
func (r *CSVReader) parseSlow(line []byte) (blank bool, err error) {
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	if len(trimSpace(line)) == 0 {
		return true, nil
	}
	nf := 0
	for rest := line; ; {
		i := bytes.IndexByte(rest, ',')
		f := rest
		if i >= 0 {
			f = rest[:i]
		}
		if nf < len(r.fields) {
			r.fields[nf] = trimSpace(f)
		}
		nf++
		if i < 0 {
			break
		}
		rest = rest[i+1:]
	}
	if nf != len(r.cols) {
		return false, r.errorf("got %d fields, want %d (%s)", nf, len(r.cols), r.headerText())
	}
	ev, rec := &r.ev, &r.rec
	rec.tok = nil
	rec.hasSize, rec.hasStream, rec.hasDevice = false, false, false
	ev.Stream, ev.Device, ev.TimeUS = 0, 0, NoTime
	for i, col := range r.cols {
		f := r.fields[i]
		switch col {
		case ColOp:
			switch {
			case bytes.EqualFold(f, []byte("alloc")):
				ev.Op = OpAlloc
			case bytes.EqualFold(f, []byte("free")):
				ev.Op = OpFree
			case len(f) == 0:
				return false, r.errorf("missing op")
			default:
				return false, r.errorf("unknown op %s (want alloc or free)", quote(f))
			}
		case ColID:
			if len(f) == 0 {
				return false, r.errorf("missing id")
			}
			if k, ok := idKeyOf(f); ok {
				ev.ID = k
			} else {
				rec.tok = f
			}
		case ColSize:
			if len(f) == 0 {
				break
			}
			v, err := r.parseNum(f, "size", false, 1, 1<<63-1)
			if err != nil {
				return false, err
			}
			ev.Size, rec.hasSize = int64(v), true
		case ColStream:
			if len(f) == 0 {
				break
			}
			v, err := r.parseNum(f, "stream", true, 0, 1<<64-1)
			if err != nil {
				return false, err
			}
			ev.Stream, rec.hasStream = v, true
		case ColDevice:
			if len(f) == 0 {
				break
			}
			v, err := r.parseNum(f, "device", false, 0, 1<<31-1)
			if err != nil {
				return false, err
			}
			ev.Device, rec.hasDevice = int32(v), true
		case ColTime:
			if len(f) == 0 {
				return false, r.errorf("missing time_us")
			}
			v, err := r.parseNum(f, "time_us", false, 0, 1<<63-1)
			if err != nil {
				return false, err
			}
			ev.TimeUS = int64(v)
		}
	}
	return false, nil
}

// parseNum parses the decimal (or, if hex, also 0x-hexadecimal) number f of
// the column named col, which must lie in [lo, hi].
func (r *CSVReader) parseNum(f []byte, col string, hex bool, lo, hi uint64) (uint64, error) {
	s := string(f) // only on the slow path
	var v uint64
	var err error
	if hex && len(s) > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X') {
		v, err = strconv.ParseUint(s[2:], 16, 64)
	} else if s[0] >= '0' && s[0] <= '9' {
		v, err = strconv.ParseUint(s, 10, 64)
	} else if s[0] == '-' && len(s) > 1 && s[1] >= '0' && s[1] <= '9' && onlyDigits(s[1:]) {
		return 0, r.errorf("bad %s %s: %s", col, quote(f), mustBe(lo))
	} else {
		err = strconv.ErrSyntax
	}
	switch {
	case errors.Is(err, strconv.ErrRange) || err == nil && v > hi:
		return 0, r.errorf("bad %s %s: larger than %d", col, quote(f), hi)
	case err != nil:
		return 0, r.errorf("bad %s %s: not a number", col, quote(f))
	case v < lo:
		return 0, r.errorf("bad %s %s: %s", col, quote(f), mustBe(lo))
	}
	return v, nil
}

func mustBe(lo uint64) string {
	if lo == 1 {
		return "must be > 0"
	}
	return "must be >= " + strconv.FormatUint(lo, 10)
}

func onlyDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// apply checks the event parsed into r.ev and r.rec against the live
// allocations and the previous time, updates them and completes r.ev.
func (r *CSVReader) apply() error {
	ev, rec := &r.ev, &r.rec
	if ev.TimeUS < r.lastTime {
		return r.errorf("time_us %d is before the previous event's %d", ev.TimeUS, r.lastTime)
	}
	if ev.Op == OpAlloc {
		if !rec.hasSize {
			return r.errorf("missing size on alloc of id %s", r.idText())
		}
		if rec.tok != nil {
			if _, live := r.tokens[string(rec.tok)]; live {
				return r.errorf("alloc of id %s that is already live", r.idText())
			}
			ev.ID = idTokenTag | r.nextToken
		}
		ev.Slot = r.nslots
		if n := len(r.freeSlots); n > 0 {
			ev.Slot = r.freeSlots[n-1]
		}
		if !r.live.insert(liveInfo{key: ev.ID, size: ev.Size, stream: ev.Stream, slot: ev.Slot, device: ev.Device}) {
			return r.errorf("alloc of id %s that is already live", r.idText())
		}
		if n := len(r.freeSlots); n > 0 {
			r.freeSlots = r.freeSlots[:n-1]
		} else {
			r.nslots++
		}
		if rec.tok != nil {
			r.tokens[string(rec.tok)] = ev.ID
			r.nextToken++
		}
	} else {
		if rec.tok != nil {
			k, ok := r.tokens[string(rec.tok)]
			if !ok {
				return r.errorf("free of unknown id %s", r.idText())
			}
			ev.ID = k
		}
		i := r.live.find(ev.ID)
		if i < 0 {
			return r.errorf("free of unknown id %s", r.idText())
		}
		a := &r.live.e[i]
		switch {
		case rec.hasSize && ev.Size != a.size:
			return r.errorf("free of id %s with size %d, allocated with size %d", r.idText(), ev.Size, a.size)
		case rec.hasStream && ev.Stream != a.stream:
			return r.errorf("free of id %s on stream %d, allocated on stream %d", r.idText(), ev.Stream, a.stream)
		case rec.hasDevice && ev.Device != a.device:
			return r.errorf("free of id %s on device %d, allocated on device %d", r.idText(), ev.Device, a.device)
		}
		ev.Slot, ev.Size, ev.Stream, ev.Device = a.slot, a.size, a.stream, a.device
		r.live.removeAt(i)
		r.freeSlots = append(r.freeSlots, ev.Slot)
		if rec.tok != nil {
			delete(r.tokens, string(rec.tok))
		}
	}
	r.lastTime = ev.TimeUS
	return nil
}

// idText returns the id of r.rec as written, for messages.
func (r *CSVReader) idText() string {
	if r.rec.tok != nil {
		return quote(r.rec.tok)
	}
	return FormatID(r.ev.ID)
}

// errorf returns an error about the current line.
func (r *CSVReader) errorf(format string, args ...any) error {
	if r.opts.Lenient && r.firstSkip != nil {
		return errQuiet
	}
	return r.errorAt(r.line, format, args...)
}

func (r *CSVReader) errorAt(line int64, format string, args ...any) error {
	return &ParseError{Name: r.name, Line: line, Msg: fmt.Sprintf(format, args...)}
}

func (r *CSVReader) headerText() string {
	s := make([]string, len(r.cols))
	for i, c := range r.cols {
		s[i] = c.String()
	}
	return strings.Join(s, ",")
}

// quote returns a token for a message: as it is if it is plain printable
// ASCII, else quoted.
func quote(b []byte) string {
	for _, c := range b {
		if c <= ' ' || c >= 0x7f || c == '"' || c == '\\' {
			return strconv.Quote(string(b))
		}
	}
	return `"` + string(b) + `"`
}

// trimSpace removes spaces and tabs at both ends of b.
func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

// Event returns the event that the last call to Scan found.
func (r *CSVReader) Event() Event { return r.ev }

// Err returns the error that ended the trace, or nil at its clean end.
func (r *CSVReader) Err() error { return r.err }

// Name returns the trace's name, as used in errors.
func (r *CSVReader) Name() string { return r.name }

// Format returns "native CSV", the name of the reader's format.
func (r *CSVReader) Format() string { return nativeFormat }

// Columns returns the header's columns, in their order in the trace.
func (r *CSVReader) Columns() []Column { return append([]Column(nil), r.cols...) }

// HasTime reports whether the trace has a time_us column; without one,
// every event's TimeUS is [NoTime].
func (r *CSVReader) HasTime() bool { return r.hasTime }

// Line returns the number of the line of the last event found or, after an
// error, of the line the error names.
func (r *CSVReader) Line() int64 { return r.line }

// Skipped returns the number of bad events skipped so far in lenient mode.
func (r *CSVReader) Skipped() int64 { return r.skipped }

// FirstSkipped returns the error of the first bad event skipped in lenient
// mode, or nil.
func (r *CSVReader) FirstSkipped() error { return r.firstSkip }

// Live returns the number of live allocations after the last event found.
func (r *CSVReader) Live() int { return r.live.n }

// Slots returns the number of distinct slots handed out so far, which is the
// peak number of live allocations: every Event.Slot so far is below it.
func (r *CSVReader) Slots() int { return int(r.nslots) }

// Close releases the reader's resources. It does not close the source given
// to [NewReader].
func (r *CSVReader) Close() error {
	var err error
	if r.gz != nil {
		err = r.gz.Close()
	}
	return err
}
