package traces

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"strconv"
	"strings"

	"github.com/gpualloc/gpualloc"
)

// maxLineBytes is the length of the longest line a reader accepts, line
// ending included; a longer line is an error.
const maxLineBytes = 64 << 10

// Sizes of a csvReader's buffer. It starts small, for short traces and
// readers that only look at the header, and grows to maxBuf, room for the
// longest line and a byte for the newline a reader adds to a last line that
// has none, as soon as the input turns out to be longer.
const (
	minBuf = 4<<10 + 1
	maxBuf = maxLineBytes + 1
)

// pad is the number of bytes at the end of a reader's buffer that hold no
// input, so that the parser may read 8 bytes from any byte of a line (and
// the 17th byte of a number) without checking where the line ends.
const pad = 16

// A csvReader reads a trace in the native format (see the package
// documentation), and its checker checks it as it goes.
//
// A csvReader reads its input in blocks and parses each line in place. Its
// memory is a buffer of at most 64 KiB plus a table of the live allocations,
// so it depends on the peak number of live allocations, never on the length
// of the trace. Reading an event allocates nothing, except for the copy it
// keeps of an id that is not a number (see idKey) while that id is live.
type csvReader struct {
	checker
	memory []int64 // per device, from device_memory comments (devicemem.go)

	src    io.Reader // the text
	buf    []byte    // input buffer
	pos    int       // start of the next line in buf
	end    int       // end of the last complete line in buf
	w      int       // end of the data in buf
	off    int64     // offset in the text of buf[0]
	srcErr error     // error from src, after which it gives nothing more
	fields [][]byte  // scratch for splitting a line, slow path
	// fieldCols are the columns of a line in order, 0 for a column the
	// header names that is not one of the format's (carried and
	// ignored); names are the header's names.
	fieldCols []Column
	names     []string
	rec       record

	slowOnly bool // parse every line with parseSlow, for tests
}

var nativeWords = vocab{alloc: "alloc", free: "free", id: "id ", unknown: "free of unknown id %s"}

// newCSVReader returns a reader of the native trace that src holds, as
// text, named name in errors. It reads up to the header: input that is not
// a trace in the native format gives an error wrapping [ErrNotTrace].
func newCSVReader(src io.Reader, name string, opts Options) (*csvReader, error) {
	r := &csvReader{src: src, buf: make([]byte, minBuf+pad)}
	r.init(name, nativeFormat, nil, opts, &nativeWords)
	if err := r.readHeader(); err != nil {
		return nil, err
	}
	return r, nil
}

// readHeader reads up to the header and parses it.
func (r *csvReader) readHeader() error {
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
		if len(line) >= maxLineBytes {
			return r.notTrace(tooLongForHeader)
		}
		if r.line == 1 {
			line = bytes.TrimPrefix(line, []byte("\xef\xbb\xbf")) // byte order mark
		}
		line = bytes.TrimSuffix(line, []byte("\r"))
		if len(trimSpace(line)) == 0 {
			continue
		}
		if line[0] == '#' {
			if d, n, ok, err := deviceMemoryLine(line); err != nil {
				return r.fatalf("%v", err)
			} else if ok {
				setDeviceMemory(&r.memory, d, n)
			}
			continue
		}
		return r.parseHeader(line)
	}
}

const tooLongForHeader = "a line longer than 65536 bytes before any header"

func (r *csvReader) parseHeader(line []byte) error {
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
	var extra []string
	for i, s := range names {
		c := columnByName(s)
		switch {
		case s == "" && (i == 0 || i == len(names)-1):
			// pandas' DataFrame.to_csv writes its index first, in a
			// column without a name, and a trailing comma leaves a
			// last one: both are read past and ignored, as a column of
			// one's own is.
		case s == "":
			return r.fatalf("empty column name in header (column %d)", i+1)
		case c == 0:
			// A column of the researcher's own (a tag, a note) is
			// read past and ignored.
			extra = append(extra, s)
		case seen[c]:
			return r.fatalf("column %q appears twice in header", s)
		}
		if c != 0 {
			seen[c] = true
			r.cols = append(r.cols, c)
		}
		r.fieldCols = append(r.fieldCols, c)
	}
	r.names = names
	r.fields = make([][]byte, len(names))
	// Without an id column there is no trace; without a size column and
	// with a column not known, a column was likely renamed.
	for _, c := range [...]Column{ColID, ColSize} {
		if seen[c] || c == ColSize && len(extra) == 0 {
			continue
		}
		msg := "header has no " + c.String() + " column"
		if len(extra) > 0 {
			msg += fmt.Sprintf(" (not known, and ignored: %s; known: %s)", strings.Join(extra, ", "), knownColumns)
		}
		return r.fatalf("%s", msg)
	}
	r.setColumns(r.cols)
	return nil
}

// fill makes buf[pos:end] hold at least one complete line, moving the
// incomplete last line to the front of buf and reading more. At the end of
// the input it adds the missing newline of a last line that has none. It
// returns false at the end of the input or on an error, which it stores in
// r.err.
func (r *csvReader) fill() bool {
	if r.pos > 0 {
		r.w = copy(r.buf, r.buf[r.pos:r.w])
		r.off += int64(r.pos)
		r.pos, r.end = 0, 0
	}
	// The buffer grows at once if it was filled before: the input is
	// longer than its first block.
	for empty, grow := 0, r.off+int64(r.w) > 0; ; grow = false {
		if r.w >= maxLineBytes {
			if r.cols == nil {
				r.err = r.notTrace(tooLongForHeader)
			} else {
				r.line++
				r.err = r.fatalf("line too long (more than %d bytes)", maxLineBytes)
			}
			return false
		}
		if r.srcErr != nil {
			if r.srcErr != io.EOF {
				r.line++ // the line being read
				r.err = sourceError(r.name, r.line, r.srcErr)
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

// Scan advances to the next event, which Event then returns. It returns
// false at the end of the trace or at an error, which Err then returns.
func (r *csvReader) Scan() bool {
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
			if r.pos-p > maxLineBytes {
				r.err = r.fatalf("line too long (more than %d bytes)", maxLineBytes)
				return false
			}
			continue
		}
		// The fast path takes only lines far shorter than maxLineBytes.
		next, ok := 0, false
		if !r.slowOnly {
			next, ok = r.parseFast(r.buf, p)
		}
		var err error
		if !ok {
			e := p + bytes.IndexByte(b[p:], '\n')
			if e+1-p > maxLineBytes {
				r.err = r.fatalf("line too long (more than %d bytes)", maxLineBytes)
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
			err = r.event(&r.rec)
		}
		if err == nil {
			return true
		}
		if r.err = r.reject(err); r.err != nil {
			return false
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
func (r *csvReader) parseFast(buf []byte, p int) (int, bool) {
	ev, rec := &r.ev, &r.rec
	rec.tok = nil
	// A trace with a category column sets Category and hasCategory on
	// every line; a trace without leaves them as they are, false and
	// unknown, at no cost.
	rec.hasSize, rec.hasStream, rec.hasDevice = false, false, false
	ev.Stream, ev.Device, ev.TimeUS = 0, 0, NoTime
	last := len(r.fieldCols) - 1
	for i, col := range r.fieldCols {
		switch col {
		case 0:
			for c := buf[p]; c != ',' && c != '\n' && c != '\r' && c != '"'; c = buf[p] {
				p++
			}
			if buf[p] == '"' {
				return p, false
			}
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
		case ColCategory:
			n := 0
			for c := buf[p]; c >= 'a' && c <= 'z' || c == '_'; c = buf[p+n] {
				n++
			}
			cat, ok := lowerCategory(buf[p : p+n])
			if !ok {
				return p, false
			}
			ev.Category, rec.hasCategory = cat, n > 0
			p += n
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

// lowerCategory returns the category named b in lower case, as writers
// write it, or unknown for an empty b; ok is false for anything else, which
// parseSlow then matches without regard to case or reports.
func lowerCategory(b []byte) (gpualloc.Category, bool) {
	switch string(b) {
	case "":
		return gpualloc.CategoryUnknown, true
	case "parameter":
		return gpualloc.CategoryParameter, true
	case "optimizer_state":
		return gpualloc.CategoryOptimizerState, true
	case "input":
		return gpualloc.CategoryInput, true
	case "activation":
		return gpualloc.CategoryActivation, true
	case "gradient":
		return gpualloc.CategoryGradient, true
	case "temporary":
		return gpualloc.CategoryTemporary, true
	case "autograd_detail":
		return gpualloc.CategoryAutogradDetail, true
	case "unknown":
		return gpualloc.CategoryUnknown, true
	}
	return gpualloc.CategoryUnknown, false
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
func (r *csvReader) parseSlow(line []byte) (blank bool, err error) {
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
	if nf != len(r.fieldCols) {
		return false, r.errorf("got %d fields, want %d (%s)", nf, len(r.fieldCols), r.headerText())
	}
	ev, rec := &r.ev, &r.rec
	rec.tok = nil
	rec.hasSize, rec.hasStream, rec.hasDevice = false, false, false
	ev.Stream, ev.Device, ev.TimeUS = 0, 0, NoTime
	noID := false
	for i, col := range r.fieldCols {
		f := r.fields[i]
		switch col {
		case ColOp:
			switch {
			case bytes.EqualFold(f, []byte("alloc")):
				ev.Op = OpAlloc
			case bytes.EqualFold(f, []byte("free")):
				ev.Op = OpFree
			case bytes.EqualFold(f, []byte("release")):
				ev.Op = OpRelease
			case len(f) == 0:
				return false, r.errorf("missing op")
			default:
				return false, r.errorf("unknown op %s (want alloc, free or release)", quote(f))
			}
		case ColID:
			if len(f) == 0 {
				noID = true
				break
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
		case ColCategory:
			ev.Category, rec.hasCategory = gpualloc.CategoryUnknown, len(f) > 0
			if len(f) == 0 {
				break
			}
			if ev.Category.UnmarshalText(f) != nil {
				return false, r.errorf("unknown category %s (known: %s)", quote(f), categoryNames)
			}
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
	switch {
	case ev.Op == OpRelease && rec.hasSize:
		return false, r.errorf("size on a release (a release names no allocation)")
	case ev.Op == OpRelease:
		rec.tok = nil
	case noID:
		return false, r.errorf("missing id")
	}
	return false, nil
}

// parseNum parses the decimal (or, if hex, also 0x-hexadecimal) number f of
// the column named col, which must lie in [lo, hi].
func (r *csvReader) parseNum(f []byte, col string, hex bool, lo, hi uint64) (uint64, error) {
	s := string(f) // only on the slow path
	var v uint64
	var err error
	if i := strings.IndexByte(s, '.'); i > 0 && s[:i] != "-" && onlyDigits(strings.TrimPrefix(s[:i], "-")) && onlyDigits(s[i+1:]) {
		// pandas writes the integers of a column that has empty cells
		// as floats: "4096.0". A fraction of zeros is a whole number;
		// any other is no count of bytes or microseconds.
		if strings.Trim(s[i+1:], "0") != "" {
			return 0, r.errorf("bad %s %s: not a whole number", col, quote(f))
		}
		s = s[:i]
	}
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

func (r *csvReader) headerText() string {
	return strings.Join(r.names, ",")
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
