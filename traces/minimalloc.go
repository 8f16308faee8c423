package traces

import (
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// MiniMalloc CSV: the static allocation problems of Google's MiniMalloc, one
// buffer a line, each live over the half-open interval [lower, upper):
//
//	id,lower,upper,size
//	b0,0,3,4096
//	b1,3,9,1024
//
// See the package documentation for how buffers become events.

const miniMallocFormat = "MiniMalloc CSV"

// MiniMalloc's columns, after its aliases: begin and start for lower, end
// (inclusive) for upper, buffer and buffer_id for id.
const (
	mmID = iota
	mmLower
	mmUpper
	mmSize
	mmAlignment
	mmGaps
	mmOffset
	mmColumns
)

var mmNames = [mmColumns]string{"id", "lower", "upper", "size", "alignment", "gaps", "offset"}

// mmColumn returns the column a header names, whether an upper bound is
// inclusive (end), or false for a name MiniMalloc does not know.
func mmColumn(name []byte) (col int, inclusive, ok bool) {
	switch strings.ToLower(string(name)) {
	case "id", "buffer", "buffer_id":
		return mmID, false, true
	case "lower", "begin", "start":
		return mmLower, false, true
	case "upper":
		return mmUpper, false, true
	case "end":
		return mmUpper, true, true
	case "size":
		return mmSize, false, true
	case "alignment":
		return mmAlignment, false, true
	case "gaps":
		return mmGaps, false, true
	case "offset":
		return mmOffset, false, true
	}
	return 0, false, false
}

func init() {
	registerFormat(format{name: miniMallocFormat, sniff: sniffMiniMalloc, open: func(src io.Reader, name string, opts Options) (FileReader, error) {
		return NewMiniMallocReader(src, name, opts)
	}})
}

// sniffMiniMalloc recognises a MiniMalloc CSV by its header: columns that
// MiniMalloc knows, among them an id, a lower and an upper bound and a size.
func sniffMiniMalloc(head []byte) bool {
	line, ok := firstLine(head, false)
	if !ok {
		return false
	}
	var seen [mmColumns]bool
	for f := range bytes.SplitSeq(line, []byte(",")) {
		c, _, ok := mmColumn(trimSpace(f))
		if !ok {
			return false
		}
		seen[c] = true
	}
	return seen[mmID] && seen[mmLower] && seen[mmUpper] && seen[mmSize]
}

// A mmBuffer is a buffer of a MiniMalloc problem.
type mmBuffer struct {
	lower, upper, size int64
	id                 uint64 // its ID if the id is a number (see IDKey)
	tok                string // else the id's text
	line               int64
}

// A MiniMallocReader reads a MiniMalloc CSV (see the package documentation).
// It implements [FileReader]. It cannot stream: buffers become events in
// the order of their times, which the file does not follow, so the reader
// reads every buffer first. Its memory is about 80 bytes a buffer, and
// while it reads, a set of the ids seen.
type MiniMallocReader struct {
	name string
	bufs []mmBuffer
	// allocs and frees are the indexes of bufs in the order of their
	// allocations (by lower, then line) and frees (by upper, then line).
	allocs, frees []int32
	ai, fi        int

	ev Event
	*pairing
	ids       []uint64 // the ID given to each buffer's allocation
	nextToken uint64

	skipped   int64
	firstSkip error
}

var _ FileReader = (*MiniMallocReader)(nil)

// NewMiniMallocReader returns a reader of the MiniMalloc problem that src
// holds, named name in errors. It reads the whole input and checks it: each
// line must hold a buffer with lower >= 0, upper > lower and size > 0, and
// no id may appear twice. A bad buffer is an error, or with
// [Options].Lenient is skipped and counted. Input whose first line is not a
// MiniMalloc header gives an error wrapping [ErrNotTrace]. It does not
// decompress src (see [NewAutoReader]) and does not close it.
func NewMiniMallocReader(src io.Reader, name string, opts Options) (*MiniMallocReader, error) {
	r := &MiniMallocReader{name: name, pairing: newPairing()}
	br := bufio.NewReaderSize(src, MaxLineBytes)
	var cols []int
	var inclusive bool
	var lineNo int64
	seen := map[string]int64{} // the line of each id
	for {
		line, err := br.ReadSlice('\n')
		if len(line) == 0 && err == io.EOF {
			break
		}
		lineNo++
		switch {
		case err == bufio.ErrBufferFull:
			return nil, &ParseError{Name: name, Line: lineNo, Msg: fmt.Sprintf("line too long (more than %d bytes)", MaxLineBytes)}
		case err != nil && err != io.EOF:
			return nil, sourceError(name, lineNo, err)
		}
		line = bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r"))
		if lineNo == 1 {
			line = bytes.TrimPrefix(line, []byte("\xef\xbb\xbf"))
		}
		if len(trimSpace(line)) == 0 {
			continue
		}
		if cols == nil {
			if cols, inclusive, err = mmHeader(name, lineNo, line); err != nil {
				return nil, err
			}
			continue
		}
		b, err := r.parse(name, lineNo, line, cols, inclusive, seen)
		if err != nil {
			if !opts.Lenient {
				return nil, err
			}
			r.skipped++
			if r.firstSkip == nil {
				r.firstSkip = err
			}
			continue
		}
		r.bufs = append(r.bufs, b)
	}
	if cols == nil {
		return nil, &ParseError{Name: name, Msg: ErrNotTrace.Error() + " (no MiniMalloc header)", Err: ErrNotTrace}
	}
	if len(r.bufs) > 1<<31-1 {
		return nil, &ParseError{Name: name, Msg: "too many buffers"}
	}
	r.allocs = make([]int32, len(r.bufs))
	r.frees = make([]int32, len(r.bufs))
	for i := range r.bufs {
		r.allocs[i], r.frees[i] = int32(i), int32(i)
	}
	// Buffers are in line order: a stable sort keeps it among equal times.
	slices.SortStableFunc(r.allocs, func(a, b int32) int { return cmp.Compare(r.bufs[a].lower, r.bufs[b].lower) })
	slices.SortStableFunc(r.frees, func(a, b int32) int { return cmp.Compare(r.bufs[a].upper, r.bufs[b].upper) })
	r.ids = make([]uint64, len(r.bufs))
	return r, nil
}

// mmHeader parses a header line into the column of each field.
func mmHeader(name string, line int64, text []byte) ([]int, bool, error) {
	var cols []int
	var seen [mmColumns]bool
	inclusive := false
	for f := range bytes.SplitSeq(text, []byte(",")) {
		f = trimSpace(f)
		c, incl, ok := mmColumn(f)
		switch {
		case !ok:
			return nil, false, &ParseError{Name: name, Line: line, Msg: ErrNotTrace.Error() + " (first line is not a MiniMalloc header: unknown column " + quote(f) + ")", Err: ErrNotTrace}
		case seen[c]:
			return nil, false, &ParseError{Name: name, Line: line, Msg: fmt.Sprintf("column %s appears twice in header", quote(f))}
		}
		seen[c] = true
		inclusive = inclusive || incl
		cols = append(cols, c)
	}
	for _, c := range []int{mmID, mmLower, mmUpper, mmSize} {
		if !seen[c] {
			return nil, false, &ParseError{Name: name, Line: line, Msg: "header has no " + mmNames[c] + " column", Err: ErrNotTrace}
		}
	}
	return cols, inclusive, nil
}

// parse parses the buffer of a line.
func (r *MiniMallocReader) parse(name string, lineNo int64, line []byte, cols []int, inclusive bool, seen map[string]int64) (mmBuffer, error) {
	errorf := func(format string, args ...any) error {
		return &ParseError{Name: name, Line: lineNo, Msg: fmt.Sprintf(format, args...)}
	}
	var f [mmColumns][]byte
	n := 0
	for field := range bytes.SplitSeq(line, []byte(",")) {
		if n < len(cols) {
			f[cols[n]] = trimSpace(field)
		}
		n++
	}
	if n != len(cols) {
		return mmBuffer{}, errorf("got %d fields, want %d", n, len(cols))
	}
	b := mmBuffer{line: lineNo}
	if len(f[mmID]) == 0 {
		return b, errorf("missing id")
	}
	var nums [3]int64
	for i, c := range []int{mmLower, mmUpper, mmSize} {
		v, err := strconv.ParseInt(string(f[c]), 10, 64)
		switch {
		case errors.Is(err, strconv.ErrRange):
			return b, errorf("bad %s %s: out of range", mmNames[c], quote(f[c]))
		case err != nil:
			return b, errorf("bad %s %s: not a number", mmNames[c], quote(f[c]))
		}
		nums[i] = v
	}
	b.lower, b.upper, b.size = nums[0], nums[1], nums[2]
	if inclusive {
		if b.upper == 1<<63-1 {
			return b, errorf("bad end %s: out of range", quote(f[mmUpper]))
		}
		b.upper++
	}
	switch {
	case b.lower < 0:
		return b, errorf("bad lower %d: must be >= 0", b.lower)
	case b.upper <= b.lower:
		return b, errorf("empty lifetime [%d, %d): upper must be > lower", b.lower, b.upper)
	case b.size <= 0:
		return b, errorf("bad size %d: must be > 0", b.size)
	case len(f[mmGaps]) > 0:
		return b, errorf("gaps are not supported (buffer %s)", quote(f[mmID]))
	}
	if prev, dup := seen[string(f[mmID])]; dup {
		return b, errorf("buffer id %s appears twice (first on line %d)", quote(f[mmID]), prev)
	}
	seen[string(f[mmID])] = lineNo
	if id, ok := idKeyOf(f[mmID]); ok {
		b.id = id
	} else {
		b.tok = string(f[mmID])
	}
	return b, nil
}

// Scan advances to the next event, which Event then returns. It returns
// false at the end of the trace.
func (r *MiniMallocReader) Scan() bool {
	// At equal times frees come first: a buffer whose interval ends at t
	// and one whose interval begins at t are never live together.
	switch {
	case r.fi < len(r.frees) && (r.ai == len(r.allocs) || r.bufs[r.frees[r.fi]].upper <= r.bufs[r.allocs[r.ai]].lower):
		i := r.frees[r.fi]
		r.fi++
		ev := Event{Op: OpFree, ID: r.ids[i], TimeUS: r.bufs[i].upper}
		r.free(&ev)
		r.ev = ev
		return true
	case r.ai < len(r.allocs):
		i := r.allocs[r.ai]
		r.ai++
		b := &r.bufs[i]
		id := b.id
		if b.tok != "" {
			id = idTokenTag | r.nextToken
			r.nextToken++
		}
		r.ids[i] = id
		ev := Event{Op: OpAlloc, ID: id, Size: b.size, TimeUS: b.lower}
		r.alloc(&ev) // ids are distinct: it cannot be live
		r.ev = ev
		return true
	}
	return false
}

// Event returns the event that the last call to Scan found.
func (r *MiniMallocReader) Event() Event { return r.ev }

// Err returns nil: the reader checks its input when it is created.
func (r *MiniMallocReader) Err() error { return nil }

// Name returns the trace's name, as used in errors.
func (r *MiniMallocReader) Name() string { return r.name }

// Format returns "MiniMalloc CSV".
func (r *MiniMallocReader) Format() string { return miniMallocFormat }

// Columns returns the native columns of the problem's events: op, id,
// size and time_us.
func (r *MiniMallocReader) Columns() []Column { return []Column{ColOp, ColID, ColSize, ColTime} }

// Buffers returns the number of buffers read.
func (r *MiniMallocReader) Buffers() int { return len(r.bufs) }

// Skipped returns the number of bad buffers skipped in lenient mode.
func (r *MiniMallocReader) Skipped() int64 { return r.skipped }

// FirstSkipped returns the error of the first bad buffer skipped in lenient
// mode, or nil.
func (r *MiniMallocReader) FirstSkipped() error { return r.firstSkip }

// Close releases the buffers.
func (r *MiniMallocReader) Close() error {
	r.bufs, r.allocs, r.frees, r.ids = nil, nil, nil, nil
	r.ai, r.fi = 0, 0
	return nil
}
