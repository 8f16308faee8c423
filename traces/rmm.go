package traces

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// RMM logs: the CSV that RAPIDS Memory Manager's logging_resource_adaptor
// writes, one line per allocation, failed allocation or free:
//
//	Thread,Time,Action,Pointer,Size,Stream
//	140573312345856,11:38:44.503370,allocate,0x7f8a40000000,1024,0x0
//	140573312345856,11:38:44.503411,free,0x7f8a40000000,1024,0x0
//
// See the package documentation for how a log becomes events.

const rmmFormat = "RMM log"

var rmmHeader = []byte("Thread,Time,Action,Pointer,Size,Stream")

func init() {
	registerFormat(format{name: rmmFormat, sniff: sniffRMM, open: func(src io.Reader, name string, opts Options) (FileReader, error) {
		return NewRMMReader(src, name, opts)
	}})
}

// sniffRMM recognises an RMM log by its header.
func sniffRMM(head []byte) bool {
	line, ok := firstLine(head, false)
	return ok && equalFoldFields(line, rmmHeader)
}

// equalFoldFields reports whether the comma-separated fields of line,
// trimmed of spaces, are those of want, without regard to case.
func equalFoldFields(line, want []byte) bool {
	for {
		i, j := bytes.IndexByte(line, ','), bytes.IndexByte(want, ',')
		if (i < 0) != (j < 0) {
			return false
		}
		if i < 0 {
			return bytes.EqualFold(trimSpace(line), want)
		}
		if !bytes.EqualFold(trimSpace(line[:i]), want[:j]) {
			return false
		}
		line, want = line[i+1:], want[j+1:]
	}
}

// An RMMReader reads an RMM log (see the package documentation) and checks
// it as it goes. It implements [FileReader]. It streams: its memory is a
// buffer of 64 KiB and a table of the live allocations.
type RMMReader struct {
	name string
	opts Options
	br   *bufio.Reader
	line int64
	err  error
	ev   Event
	*pairing

	clock    bool  // times are clock times "HH:MM:SS.ffffff", not seconds
	started  bool  // base is set
	base     int64 // the first event's time, in µs
	day      int64 // µs added to clock times for the midnights passed
	lastTime int64 // the previous event's time, in µs, day included

	failures  int64
	skipped   int64
	firstSkip error
}

var _ FileReader = (*RMMReader)(nil)

// NewRMMReader returns a reader of the RMM log that src holds, named name in
// errors. It reads the header: input that does not start with RMM's header
// gives an error wrapping [ErrNotTrace]. It does not decompress src (see
// [NewAutoReader]) and does not close it.
func NewRMMReader(src io.Reader, name string, opts Options) (*RMMReader, error) {
	r := &RMMReader{name: name, opts: opts, br: bufio.NewReaderSize(src, MaxLineBytes), pairing: newPairing()}
	for {
		line, ok := r.next()
		if !ok {
			if r.err != nil {
				return nil, r.err
			}
			return nil, &ParseError{Name: name, Msg: ErrNotTrace.Error() + " (no RMM log header)", Err: ErrNotTrace}
		}
		if r.line == 1 {
			line = bytes.TrimPrefix(line, []byte("\xef\xbb\xbf"))
		}
		if len(trimSpace(line)) == 0 {
			continue
		}
		if !equalFoldFields(line, rmmHeader) {
			return nil, &ParseError{Name: name, Line: r.line, Msg: ErrNotTrace.Error() + " (first line is not the RMM log header " + string(rmmHeader) + ")", Err: ErrNotTrace}
		}
		return r, nil
	}
}

// next returns the next line, without its line ending, or false at the end
// of the input or on an error, which it stores in r.err.
func (r *RMMReader) next() ([]byte, bool) {
	if r.err != nil {
		return nil, false
	}
	line, err := r.br.ReadSlice('\n')
	if len(line) == 0 && err == io.EOF {
		return nil, false
	}
	r.line++
	switch {
	case err == bufio.ErrBufferFull:
		r.err = &ParseError{Name: r.name, Line: r.line, Msg: fmt.Sprintf("line too long (more than %d bytes)", MaxLineBytes)}
		return nil, false
	case err != nil && err != io.EOF:
		r.err = sourceError(r.name, r.line, err)
		return nil, false
	}
	line = bytes.TrimSuffix(line, []byte("\n"))
	return bytes.TrimSuffix(line, []byte("\r")), true
}

// Scan advances to the next event, which Event then returns. It returns
// false at the end of the trace or at an error, which Err then returns.
func (r *RMMReader) Scan() bool {
	for {
		line, ok := r.next()
		if !ok {
			return false
		}
		if len(trimSpace(line)) == 0 {
			continue
		}
		event, err := r.parse(line)
		if err == nil && !event {
			continue // a failed allocation
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

// parse parses a line into r.ev and checks it against the live
// allocations; event is false for a failed allocation, which it counts.
func (r *RMMReader) parse(line []byte) (event bool, err error) {
	var f [6][]byte
	n := 0
	for rest := line; ; n++ {
		i := bytes.IndexByte(rest, ',')
		if n < len(f) {
			if i < 0 {
				f[n] = trimSpace(rest)
			} else {
				f[n] = trimSpace(rest[:i])
			}
		}
		if i < 0 {
			break
		}
		rest = rest[i+1:]
	}
	if n+1 != len(f) {
		return false, r.errorf("got %d fields, want 6 (%s)", n+1, rmmHeader)
	}
	t, err := r.parseTime(f[1])
	if err != nil {
		return false, err
	}
	var op Op
	switch action := f[2]; {
	case bytes.Equal(action, []byte("allocate")):
		op = OpAlloc
	case bytes.Equal(action, []byte("free")), bytes.Equal(action, []byte("deallocate")):
		op = OpFree
	case bytes.Equal(action, []byte("allocate failure")):
		r.setTime(t)
		r.failures++
		return false, nil
	default:
		return false, r.errorf("unknown action %s (want allocate, allocate failure or free)", quote(action))
	}
	ptr, ok := parseHex(f[3])
	if !ok || ptr > idValueMask {
		return false, r.errorf("bad pointer %s: not a hexadecimal address such as 0x7f3a00000000", quote(f[3]))
	}
	if ptr == 0 {
		return false, r.errorf("%s of a null pointer", action(op))
	}
	size, err := strconv.ParseInt(string(f[4]), 10, 64)
	switch {
	case err != nil && errors.Is(err, strconv.ErrRange):
		return false, r.errorf("bad size %s: larger than %d", quote(f[4]), int64(1<<63-1))
	case err != nil:
		return false, r.errorf("bad size %s: not a number", quote(f[4]))
	case size <= 0:
		return false, r.errorf("bad size %s: must be > 0", quote(f[4]))
	}
	stream, ok := parseHex(f[5])
	if !ok {
		s, err := strconv.ParseUint(string(f[5]), 10, 64)
		if err != nil {
			return false, r.errorf("bad stream %s: not a hexadecimal or decimal number", quote(f[5]))
		}
		stream = s
	}
	ev := Event{Op: op, ID: ptr | idHexTag, Size: size, Stream: stream}
	if op == OpAlloc {
		if !r.alloc(&ev) {
			return false, r.errorf("allocate of pointer %s that is already live", FormatID(ev.ID))
		}
	} else {
		a, live := r.lookup(ev.ID)
		switch {
		case !live:
			return false, r.errorf("free of unknown pointer %s (freed twice, or allocated before the log began: reading leniently skips such frees)", FormatID(ev.ID))
		case a.size != size:
			return false, r.errorf("free of pointer %s with size %d, allocated with size %d", FormatID(ev.ID), size, a.size)
		}
		// A free may name another stream than its allocation's: RMM
		// frees are stream-ordered. The event keeps the allocation's.
		r.free(&ev)
	}
	ev.TimeUS = r.setTime(t)
	r.ev = ev
	return true, nil
}

func action(op Op) string {
	if op == OpAlloc {
		return "allocate"
	}
	return "free"
}

// µs in a day, and in half a day.
const (
	dayUS     = 24 * 3600 * 1e6
	halfDayUS = dayUS / 2
)

// parseTime parses a time: a clock time "HH:MM:SS.ffffff" (the fraction of
// any length, at most microseconds kept), or seconds "1634567890.234567".
// The first event decides which; every later one must be the same.
func (r *RMMReader) parseTime(f []byte) (int64, error) {
	clock := bytes.IndexByte(f, ':') >= 0
	if r.started && clock != r.clock {
		return 0, r.errorf("bad time %s: not in the form of the first event's", quote(f))
	}
	var us int64
	var ok bool
	if clock {
		us, ok = parseClock(f)
		if !ok {
			return 0, r.errorf("bad time %s: want a clock time HH:MM:SS.ffffff", quote(f))
		}
	} else {
		us, ok = parseSeconds(f)
		if !ok {
			return 0, r.errorf("bad time %s: want a clock time HH:MM:SS.ffffff", quote(f))
		}
	}
	if !r.started {
		r.clock = clock
	}
	return us, nil
}

// setTime makes t, a time from parseTime, the latest time, and returns it as
// the µs since the first event. A clock time more than half a day before the
// previous one is on the next day; a time slightly before the previous one
// (threads write their lines in an order a little different from their
// times) is taken as the previous one, so that times never go backwards.
func (r *RMMReader) setTime(t int64) int64 {
	if !r.started {
		r.started, r.base, r.lastTime = true, t, t
		return 0
	}
	if r.clock {
		t += r.day
		if t < r.lastTime-halfDayUS {
			r.day += dayUS
			t += dayUS
		}
	}
	if t < r.lastTime {
		t = r.lastTime
	}
	r.lastTime = t
	return t - r.base
}

// parseClock parses "HH:MM:SS" with an optional fraction of a second into
// µs since midnight.
func parseClock(f []byte) (int64, bool) {
	if len(f) < 8 || f[2] != ':' || f[5] != ':' {
		return 0, false
	}
	h, ok1 := twoDigits(f[0:2])
	m, ok2 := twoDigits(f[3:5])
	s, ok3 := twoDigits(f[6:8])
	if !ok1 || !ok2 || !ok3 || h > 23 || m > 59 || s > 60 {
		return 0, false
	}
	frac, ok := parseFraction(f[8:])
	if !ok {
		return 0, false
	}
	return ((h*60+m)*60+s)*1e6 + frac, true
}

// parseSeconds parses decimal seconds with an optional fraction into µs.
func parseSeconds(f []byte) (int64, bool) {
	i := bytes.IndexByte(f, '.')
	if i < 0 {
		i = len(f)
	}
	if i == 0 || i > 12 || !onlyDigits(string(f[:i])) {
		return 0, false
	}
	s, _ := strconv.ParseInt(string(f[:i]), 10, 64)
	frac, ok := parseFraction(f[i:])
	return s*1e6 + frac, ok
}

// parseFraction parses "" or "." and 1 to 9 digits into µs, truncating.
func parseFraction(f []byte) (int64, bool) {
	if len(f) == 0 {
		return 0, true
	}
	if f[0] != '.' || len(f) < 2 || len(f) > 10 || !onlyDigits(string(f[1:])) {
		return 0, false
	}
	var us int64
	for i := 1; i <= 6; i++ {
		us *= 10
		if i < len(f) {
			us += int64(f[i] - '0')
		}
	}
	return us, true
}

func twoDigits(b []byte) (int64, bool) {
	if b[0] < '0' || b[0] > '9' || b[1] < '0' || b[1] > '9' {
		return 0, false
	}
	return int64(b[0]-'0')*10 + int64(b[1]-'0'), true
}

// parseHex parses "0x" or "0X" and 1 to 16 hexadecimal digits of either
// case; "(nil)", glibc's null pointer, is 0.
func parseHex(f []byte) (uint64, bool) {
	if bytes.Equal(f, []byte("(nil)")) {
		return 0, true
	}
	if len(f) < 3 || len(f) > 18 || f[0] != '0' || f[1] != 'x' && f[1] != 'X' {
		return 0, false
	}
	v, err := strconv.ParseUint(string(f[2:]), 16, 64)
	return v, err == nil
}

func (r *RMMReader) errorf(format string, args ...any) error {
	return &ParseError{Name: r.name, Line: r.line, Msg: fmt.Sprintf(format, args...)}
}

// Event returns the event that the last call to Scan found.
func (r *RMMReader) Event() Event { return r.ev }

// Err returns the error that ended the trace, or nil at its clean end.
func (r *RMMReader) Err() error { return r.err }

// Name returns the trace's name, as used in errors.
func (r *RMMReader) Name() string { return r.name }

// Format returns "RMM log".
func (r *RMMReader) Format() string { return rmmFormat }

// Columns returns the native columns of the log's events: op, id (the
// pointer), size, stream and time_us.
func (r *RMMReader) Columns() []Column {
	return []Column{ColOp, ColID, ColSize, ColStream, ColTime}
}

// Line returns the number of the line of the last event found or, after an
// error, of the line the error names.
func (r *RMMReader) Line() int64 { return r.line }

// AllocFailures returns the number of "allocate failure" lines read so far.
func (r *RMMReader) AllocFailures() int64 { return r.failures }

// Skipped returns the number of bad events skipped so far in lenient mode.
func (r *RMMReader) Skipped() int64 { return r.skipped }

// FirstSkipped returns the error of the first bad event skipped in lenient
// mode, or nil.
func (r *RMMReader) FirstSkipped() error { return r.firstSkip }

// Close releases nothing: a reader given to NewRMMReader does not close its
// source.
func (r *RMMReader) Close() error { return nil }
