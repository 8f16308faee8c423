package traces

import (
	"bufio"
	"bytes"
	"errors"
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
	registerFormat(format{name: rmmFormat, sniff: sniffRMM, open: func(src io.Reader, name string, opts Options) (formatReader, error) {
		return newRMMReader(src, name, opts)
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

// An rmmReader reads an RMM log (see the package documentation), and its
// checker checks it as it goes. It streams: its memory is a buffer of
// 64 KiB and a table of the live allocations.
type rmmReader struct {
	checker
	br *bufio.Reader

	clock   bool  // times are clock times "HH:MM:SS.ffffff", not seconds
	started bool  // base is set
	base    int64 // the first time of the log, in µs
	day     int64 // µs added to clock times for the midnights passed
}

var rmmWords = vocab{alloc: "allocate", free: "free", id: "pointer ",
	unknown: "free of unknown pointer %s (freed twice, or allocated before the log began: reading leniently skips such frees)"}

// newRMMReader returns a reader of the RMM log that src holds, as text,
// named name in errors. It reads the header: input that does not start with
// RMM's header gives an error wrapping [ErrNotTrace].
func newRMMReader(src io.Reader, name string, opts Options) (*rmmReader, error) {
	r := &rmmReader{br: bufio.NewReaderSize(src, maxLineBytes)}
	r.init(name, rmmFormat, []Column{ColOp, ColID, ColSize, ColStream, ColTime}, opts, &rmmWords)
	r.clamp = true
	line, ok := r.readLine(r.br)
	switch {
	case r.err != nil:
		return nil, r.err
	case !ok:
		return nil, r.notTrace("no RMM log header")
	case !equalFoldFields(line, rmmHeader):
		err := r.notTrace("first line is not the RMM log header " + string(rmmHeader))
		err.Line = r.line
		return nil, err
	}
	return r, nil
}

// Scan advances to the next event, which Event then returns. It returns
// false at the end of the trace or at an error, which Err then returns.
func (r *rmmReader) Scan() bool {
	for {
		line, ok := r.readLine(r.br)
		if !ok {
			return false
		}
		var rec record
		t, err := r.parse(line, &rec)
		if err == nil && r.ev.Op == 0 {
			// A failed allocation: not an event, but its time counts.
			us, day := r.timeOf(t)
			r.setTime(t, day)
			r.observe(us)
			r.countFailure(0) // RMM's logs name no device
			continue
		}
		if err == nil {
			var day int64
			r.ev.TimeUS, day = r.timeOf(t)
			if err = r.event(&rec); err == nil {
				r.setTime(t, day)
				return true
			}
		}
		if r.err = r.reject(err); r.err != nil {
			return false
		}
	}
}

// parse parses a line into r.ev, but for its time, and rec; it returns the
// time of the line as parseTime does. A failed allocation leaves r.ev.Op 0.
func (r *rmmReader) parse(line []byte, rec *record) (t int64, err error) {
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
		return 0, r.errorf("got %d fields, want 6 (%s)", n+1, rmmHeader)
	}
	t, err = r.parseTime(f[1])
	if err != nil {
		return 0, err
	}
	r.ev = Event{}
	switch action := f[2]; {
	case bytes.Equal(action, []byte("allocate")):
		r.ev.Op = OpAlloc
	case bytes.Equal(action, []byte("free")), bytes.Equal(action, []byte("deallocate")):
		r.ev.Op = OpFree
	case bytes.Equal(action, []byte("allocate failure")):
		return t, nil
	default:
		return 0, r.errorf("unknown action %s (want allocate, allocate failure or free)", quote(action))
	}
	ptr, ok := parseHex(f[3])
	if !ok || ptr > idValueMask {
		return 0, r.errorf("bad pointer %s: not a hexadecimal address such as 0x7f3a00000000", quote(f[3]))
	}
	if ptr == 0 {
		action := r.words.alloc
		if r.ev.Op == OpFree {
			action = r.words.free
		}
		return 0, r.errorf("%s of a null pointer", action)
	}
	size, err := strconv.ParseInt(string(f[4]), 10, 64)
	switch {
	case err != nil && errors.Is(err, strconv.ErrRange):
		return 0, r.errorf("bad size %s: larger than %d", quote(f[4]), int64(1<<63-1))
	case err != nil:
		return 0, r.errorf("bad size %s: not a number", quote(f[4]))
	case size <= 0:
		return 0, r.errorf("bad size %s: must be > 0", quote(f[4]))
	}
	stream, ok := parseHex(f[5])
	if !ok {
		s, err := strconv.ParseUint(string(f[5]), 10, 64)
		if err != nil {
			return 0, r.errorf("bad stream %s: not a hexadecimal or decimal number", quote(f[5]))
		}
		stream = s
	}
	// A free must give its allocation's size, but may name another
	// stream: RMM frees are stream-ordered. The event keeps the
	// allocation's.
	r.ev.ID, r.ev.Size, r.ev.Stream = ptr|idHexTag, size, stream
	rec.hasSize = true
	return t, nil
}

// µs in a day, and in half a day.
const (
	dayUS     = 24 * 3600 * 1e6
	halfDayUS = dayUS / 2
)

// parseTime parses a time: a clock time "HH:MM:SS.ffffff" (the fraction of
// any length, at most microseconds kept), or seconds "1634567890.234567".
// The first event decides which; every later one must be the same.
func (r *rmmReader) parseTime(f []byte) (int64, error) {
	clock := bytes.IndexByte(f, ':') >= 0
	if r.started && clock != r.clock {
		return 0, r.errorf("bad time %s: the first event's time is %s, and every time must be", quote(f), timeForm(r.clock))
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
			return 0, r.errorf("bad time %s: want seconds such as 1634567890.234567", quote(f))
		}
	}
	if !r.started {
		r.clock = clock
	}
	return us, nil
}

// timeForm names a form of times, for messages.
func timeForm(clock bool) string {
	if clock {
		return "a clock time HH:MM:SS.ffffff"
	}
	return "in seconds (1634567890.234567)"
}

// timeOf returns t, a time from parseTime, as µs since the log's first
// time, and the µs that the midnights passed add to it; setTime makes it
// the latest time. A clock time more than half a day before the previous
// event's is on the next day. (A time slightly before the previous event's,
// as threads write their lines in an order a little different from their
// times, is the checker's to raise.)
func (r *rmmReader) timeOf(t int64) (us, day int64) {
	if !r.started {
		return 0, 0
	}
	if r.clock {
		day = r.day
		if t+day < r.base+r.last-halfDayUS {
			day += dayUS
		}
	}
	return t + day - r.base, day
}

func (r *rmmReader) setTime(t, day int64) {
	if !r.started {
		r.started, r.base = true, t
	}
	r.day = day
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
