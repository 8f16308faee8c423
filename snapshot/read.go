package snapshot

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/big"
	"strconv"
	"strings"
	"unicode"

	"github.com/gpualloc/gpualloc/snapshot/internal/pages"
	"github.com/gpualloc/gpualloc/snapshot/internal/pickle"
	ogórek "github.com/kisielk/og-rek"
)

// ErrNotSnapshot is wrapped by the error of [Read] when its input is not a
// PyTorch snapshot: not a pickle, or a pickle that holds no dict with a
// "segments" list. Another format may claim such input.
var ErrNotSnapshot = errors.New("not a PyTorch snapshot")

// An Error is a problem with a snapshot file.
type Error struct {
	Name string // the file's name, as given to Read
	Msg  string // what is wrong, from the field at fault: "segments[3].size: negative: -1"
	Err  error  // the cause, if any: ErrNotSnapshot, a decoding or I/O error
}

func (e *Error) Error() string { return e.Name + ": " + e.Msg }

func (e *Error) Unwrap() error { return e.Err }

func notSnapshot(name, why string, cause error) error {
	return &Error{Name: name, Msg: "not a PyTorch snapshot (" + why + ")", Err: errors.Join(ErrNotSnapshot, cause)}
}

// notSnapshotError is the decoder's word that its input is not a
// snapshot.
type notSnapshotError struct{ why string }

func (e *notSnapshotError) Error() string { return e.why }

func errNotSnapshot(why string) error { return &notSnapshotError{why} }

// ReadOptions choose how [ReadWith] reads.
type ReadOptions struct {
	// Progress, if not nil, is called as the input is read with the bytes
	// read so far (before decompression), at most once per MiB.
	Progress func(read int64)
	// NoStacks leaves out the recorded stacks: Snapshot.Frames and
	// Stacks are nil and every Stack is 0, while EmptyCache is still
	// told from the frames. A read that needs no stacks (a replay, an
	// inspection) saves interning one stack per trace entry, about a
	// sixth of the read's time on a file whose entries list 40 to 90
	// frames.
	NoStacks bool
	// MaxHeld is the bytes of pages of records and memo that a read holds
	// before it writes each page it fills after them to an unnamed
	// temporary file in TempDir, and reads it back when it is needed, so
	// that its memory is bounded whatever the length of the trace (see
	// [Trace]): 48 bytes of disk an entry, and 9 a memo entry. Where that
	// file cannot be made or written, the read fails, naming it. 0 is 256
	// MiB.
	MaxHeld int64
	// TempDir is the directory of the read's temporary file, if it needs
	// one; "" is [os.TempDir] (TMPDIR).
	TempDir string

	// Bounds that the tests lower, each 0 for its default.
	maxLoaded    int   // the most spilled pages of a list loaded at a time (defaultLoaded)
	prefetchFrom int64 // the bytes read from which the input is read ahead (pickle.PrefetchFrom)
	runsFrom     int   // the memo entries from which runs of frames are looked up (defaultRunsFrom)
	maxTrace     int   // the most entries of a device's trace (defaultMaxTrace)
}

// orDefault returns v, or def where v is 0.
func orDefault[T int | int64](v, def T) T {
	if v == 0 {
		return def
	}
	return v
}

// Read decodes a PyTorch memory snapshot from r, read to its end, naming it
// name in errors: [ReadWith] with no options.
func Read(r io.Reader, name string) (*Snapshot, error) {
	return ReadWith(r, name, ReadOptions{})
}

// ReadWith decodes a PyTorch memory snapshot from r, read to its end,
// naming it name in errors. Input compressed with gzip (recognised by its
// first bytes) is decompressed as it is read.
//
// Every error is an [*Error]. Input that is not a pickle of protocol 2 to
// 5, a damaged or truncated pickle (named by the byte offset of the fault
// in the pickle), or a pickle that is not a snapshot (no "segments" list)
// gives one wrapping [ErrNotSnapshot]. A pickle that names Python code
// (GLOBAL, STACK_GLOBAL, REDUCE, BUILD, INST, OBJ, NEWOBJ, persistent
// ids, ...) is refused wherever it stands, even under a key the package
// ignores: loading it in Python would run that code; so is a string that
// Python would not decode. A field that a replay needs of the wrong type
// or out of range gives one naming the field: "x.pickle:
// segments[3].blocks[0].size: not an integer but a string"; an oom entry
// without a "size" is refused so. Fields that a replay does not need,
// and keys that the package does not model, never fail a read (see the
// package doc). A file that repeats more than [MaxRepeated] entries,
// blocks or segments through memo references is refused. A gzip file is
// read to its end as Python's gzip module reads one: member after member,
// NUL bytes after a member skipped as padding, and refused when a CRC or
// size is wrong or what follows a member is not one. Read
// does not check that the trace fits the segments: see
// [Snapshot.InitialState].
//
// Older files are read for what they hold: a bare list of segments
// (torch.cuda.memory_snapshot(), and PyTorch before 2.0) is a snapshot
// with no trace and no settings; a block with no "address" (PyTorch 2.0
// and 2.1) starts where the one before it ends, the first at its segment's
// address.
func ReadWith(r io.Reader, name string, o ReadOptions) (*Snapshot, error) {
	if o.Progress != nil {
		r = &counter{r: r, f: o.Progress}
	}
	d := newDecoder(r, o)
	// What the read opened closes in the order it was opened, each
	// reader after the goroutine that reads it has stopped.
	var zr *gzipReader
	defer func() {
		d.In.Stop() // d.In changes for gzip
		if zr != nil {
			zr.Close()
		}
	}()
	d.noStacks = o.NoStacks
	gz := ""
	for range 2 {
		if !d.In.Need(2) && d.In.Err != nil && d.In.Err != io.EOF {
			return nil, &Error{Name: name, Msg: "read: " + d.In.Err.Error(), Err: d.In.Err}
		}
		if b := d.In.Buf[d.In.Pos:d.In.End]; gz != "" || len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
			break
		}
		// gzip: decompress as the pickle is read, starting with the bytes
		// read so far.
		z, err := newGzipReader(io.MultiReader(bytes.NewReader(bytes.Clone(d.In.Buf[d.In.Pos:d.In.End])), r))
		if err != nil {
			return nil, &Error{Name: name, Msg: "read: gzip: " + err.Error(), Err: err}
		}
		zr = z
		d.In.Switch(zr)
		gz = " of the decompressed data"
	}
	if b := d.In.Buf[d.In.Pos:d.In.End]; len(b) < 2 || b[0] != pickle.OpProto || b[1] < 2 || b[1] > 5 {
		return nil, notSnapshot(name, "not a pickle of protocol 2 to 5", nil)
	}
	// From here on the input is only the pickle's: a long one is read
	// ahead on a goroutine.
	d.In.Ahead = true
	v, err := d.run()
	if err == nil && zr != nil {
		// The gzip stream to its end, where its CRC and size are
		// checked; what the pickle leaves after its STOP is ignored, as
		// Python's pickle.load ignores it.
		if err := d.In.Drain(); err != nil {
			return nil, &Error{Name: name, Msg: "read: the end of the gzip stream: " + oneLine(err.Error()), Err: err}
		}
	}
	var s *Snapshot
	if err == nil {
		s, err = d.snapshotOf(v, name)
	}
	var spe *pages.Error
	if errors.As(d.Err, &spe) {
		err = d.Err // the spill's failure, which may have caused others
	}
	if err != nil || !s.readsBack() {
		d.sp.Close()
	}
	if err == nil {
		for _, t := range s.traces {
			t.held.name = name
		}
		return s, nil
	}
	var pe *pickle.Error
	var fe *fieldError
	var ne *notSnapshotError
	var se *Error
	switch {
	case errors.As(err, &spe):
		return nil, &Error{Name: name, Msg: oneLine(spe.Error()), Err: spe.Err}
	case errors.As(err, &pe):
		return nil, notSnapshot(name, "bad pickle: "+oneLine(pe.Error())+gz, err)
	case errors.As(err, &fe):
		return nil, &Error{Name: name, Msg: oneLine(fe.msg)}
	case errors.As(err, &ne):
		return nil, notSnapshot(name, ne.why, nil)
	case errors.As(err, &se):
		return nil, err
	}
	return nil, &Error{Name: name, Msg: "read: " + oneLine(err.Error()), Err: err}
}

// readsBack reports whether a trace of s reads pages back from the
// temporary file of its read.
func (s *Snapshot) readsBack() bool {
	for _, t := range s.traces {
		if t.held.spilled != nil {
			return true
		}
	}
	return false
}

func newDecoder(r io.Reader, o ReadOptions) *decoder {
	d := &decoder{
		Machine:  pickle.NewMachine(pickle.NewInput(r, o.prefetchFrom), func(s string) uint8 { return uint8(keyNamed(s)) }),
		runsFrom: orDefault(o.runsFrom, defaultRunsFrom),
		maxTrace: orDefault(o.maxTrace, defaultMaxTrace),
	}
	d.sp = newSpill(o, &d.Err)
	d.Memo.Init(d.sp)
	return d
}

// counter reports the bytes read through it, once per MiB.
type counter struct {
	r    io.Reader
	f    func(int64)
	n    int64
	next int64
}

func (c *counter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if c.n >= c.next || err != nil {
		c.f(c.n)
		c.next = c.n + 1<<20
	}
	return n, err
}

// oneLine escapes the control characters of a message, such as the bytes
// that the decoder quotes, so that it stays on one line.
func oneLine(msg string) string {
	var b strings.Builder
	for _, r := range msg {
		if unicode.IsControl(r) {
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// parser converts decoded values of allocator_settings (og-rek's types,
// which the decoder's plain gives) into AllocatorSettings, keeping the
// first error.
type parser struct {
	name string
	err  error
}

func (p *parser) fail(path, msg string) error {
	if p.err == nil {
		p.err = &Error{Name: p.name, Msg: path + ": " + msg}
	}
	return p.err
}

func isNone(v any) bool { return v == nil || v == (ogórek.None{}) }

func (p *parser) dict(v any, path string) map[any]any {
	m, ok := v.(map[any]any)
	if !ok {
		p.fail(path, "not a dict but "+pyType(v))
	}
	return m
}

// toInt64 returns an integer (or bool) value as an int64.
func toInt64(v any) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, true
	case bool:
		if x {
			return 1, true
		}
		return 0, true
	case *big.Int:
		if x.IsInt64() {
			return x.Int64(), true
		}
	}
	return 0, false
}

// int returns the integer at key of m; absent (or None) gives def.
func (p *parser) int(m map[any]any, key string, path string, def int64) int64 {
	v, ok := m[key]
	if !ok || isNone(v) {
		return def
	}
	if n, ok := toInt64(v); ok {
		return n
	}
	p.fail(path+"."+key, "not an integer but "+pyType(v))
	return def
}

func (p *parser) str(m map[any]any, key string, path string) string {
	v, ok := m[key]
	if !ok || isNone(v) {
		return ""
	}
	if s, ok := toString(v); ok {
		return s
	}
	p.fail(path+"."+key, "not a string but "+pyType(v))
	return ""
}

func toString(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case ogórek.ByteString:
		return string(x), true
	case ogórek.Bytes:
		return string(x), true
	}
	return "", false
}

// plain converts a decoded pickle value into plain Go values: dicts with
// string keys become map[string]any (other keys are written with %v),
// tuples and lists []any, None nil, integers int64 where they fit.
func plain(v any) any {
	switch x := v.(type) {
	case map[any]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			ks, ok := k.(string)
			if !ok {
				ks = fmt.Sprint(plain(k))
			}
			m[ks] = plain(e)
		}
		return m
	case []any:
		l := make([]any, len(x))
		for i, e := range x {
			l[i] = plain(e)
		}
		return l
	case ogórek.Tuple:
		return plain([]any(x))
	case ogórek.None:
		return nil
	case ogórek.ByteString:
		return string(x)
	case ogórek.Bytes:
		return string(x)
	case *big.Int:
		if x.IsInt64() {
			return x.Int64()
		}
	}
	return v
}

// pyType names the Python type of a decoded value, for messages.
func pyType(v any) string {
	switch v.(type) {
	case nil, ogórek.None:
		return "None"
	case map[any]any:
		return "a dict"
	case []any:
		return "a list"
	case ogórek.Tuple:
		return "a tuple"
	case string, ogórek.ByteString:
		return "a string"
	case ogórek.Bytes:
		return "bytes"
	case int64, *big.Int:
		return "an integer"
	case float64:
		return "a float"
	case bool:
		return "a bool"
	}
	return fmt.Sprintf("%T", v)
}
