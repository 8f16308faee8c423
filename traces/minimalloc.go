package traces

import (
	"bufio"
	"bytes"
	"cmp"
	"errors"
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
	registerFormat(format{name: miniMallocFormat, sniff: sniffMiniMalloc, open: func(src io.Reader, name string, opts Options) (formatReader, error) {
		return newMiniMallocReader(src, name, opts)
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
	id                 uint64 // its ID if the id is a number (see idKey)
	tok                []byte // else the id's text
	line               int64
}

// A miniMallocReader reads a MiniMalloc CSV (see the package
// documentation). It cannot stream: buffers become events in the order of
// their times, which the file does not follow, so the reader reads every
// buffer first. Its memory is about 80 bytes a buffer, and while it reads,
// a set of the ids seen.
type miniMallocReader struct {
	checker
	bufs []mmBuffer
	// allocs and frees are the indexes of bufs in the order of their
	// allocations (by lower, then line) and frees (by upper, then line).
	allocs, frees []int32
	ai, fi        int
}

var miniMallocWords = vocab{alloc: "alloc", free: "free", id: "buffer ", unknown: "free of unknown buffer %s"}

// newMiniMallocReader returns a reader of the MiniMalloc problem that src
// holds, as text, named name in errors. It reads the whole input and checks
// it: each line must hold a buffer with lower >= 0, upper > lower and
// size > 0, and no id may appear twice. A bad buffer is an error, or with
// [Options].Lenient is skipped and counted. Input whose first line is not a
// MiniMalloc header gives an error wrapping [ErrNotTrace].
func newMiniMallocReader(src io.Reader, name string, opts Options) (*miniMallocReader, error) {
	r := &miniMallocReader{}
	r.init(name, miniMallocFormat, []Column{ColOp, ColID, ColSize, ColTime}, opts, &miniMallocWords)
	br := bufio.NewReaderSize(src, maxLineBytes)
	line, ok := r.readLine(br)
	if !ok {
		if r.err != nil {
			return nil, r.err
		}
		return nil, r.notTrace("no MiniMalloc header")
	}
	cols, inclusive, err := r.parseHeader(line)
	if err != nil {
		return nil, err
	}
	seen := map[string]int64{} // the line of each id
	for {
		line, ok := r.readLine(br)
		if !ok {
			break
		}
		b, err := r.parse(line, cols, inclusive, seen)
		if err != nil {
			if err := r.reject(err); err != nil {
				return nil, err
			}
			continue
		}
		r.bufs = append(r.bufs, b)
	}
	if r.err != nil {
		return nil, r.err
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
	return r, nil
}

// parseHeader parses a header line into the column of each field.
func (r *miniMallocReader) parseHeader(text []byte) ([]int, bool, error) {
	var cols []int
	var seen [mmColumns]bool
	inclusive := false
	for f := range bytes.SplitSeq(text, []byte(",")) {
		f = trimSpace(f)
		c, incl, ok := mmColumn(f)
		switch {
		case !ok:
			err := r.notTrace("first line is not a MiniMalloc header: unknown column " + quote(f))
			err.Line = r.line
			return nil, false, err
		case seen[c]:
			return nil, false, r.fatalf("column %s appears twice in header", quote(f))
		}
		seen[c] = true
		inclusive = inclusive || incl
		cols = append(cols, c)
	}
	for _, c := range []int{mmID, mmLower, mmUpper, mmSize} {
		if !seen[c] {
			err := r.fatalf("header has no %s column", mmNames[c])
			err.Err = ErrNotTrace
			return nil, false, err
		}
	}
	return cols, inclusive, nil
}

// parse parses the buffer of a line.
func (r *miniMallocReader) parse(line []byte, cols []int, inclusive bool, seen map[string]int64) (mmBuffer, error) {
	errorf := r.errorf
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
	b := mmBuffer{line: r.line}
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
	seen[string(f[mmID])] = r.line
	if id, ok := idKeyOf(f[mmID]); ok {
		b.id = id
	} else {
		b.tok = bytes.Clone(f[mmID])
	}
	return b, nil
}

// Scan advances to the next event, which Event then returns. It returns
// false at the end of the trace.
func (r *miniMallocReader) Scan() bool {
	for r.err == nil {
		// At equal times frees come first: a buffer whose interval ends
		// at t and one whose interval begins at t are never live together.
		var b *mmBuffer
		switch {
		case r.fi < len(r.frees) && (r.ai == len(r.allocs) || r.bufs[r.frees[r.fi]].upper <= r.bufs[r.allocs[r.ai]].lower):
			b = &r.bufs[r.frees[r.fi]]
			r.fi++
			r.ev = Event{Op: OpFree, ID: b.id, TimeUS: b.upper}
		case r.ai < len(r.allocs):
			b = &r.bufs[r.allocs[r.ai]]
			r.ai++
			r.ev = Event{Op: OpAlloc, ID: b.id, Size: b.size, TimeUS: b.lower}
		default:
			return false
		}
		// Buffers were checked as they were read: an error here would be
		// a bug, reported as a bad event.
		r.line = b.line
		err := r.event(&record{tok: b.tok, hasSize: r.ev.Op == OpAlloc})
		if err == nil {
			return true
		}
		r.err = r.reject(err)
	}
	return false
}

// Buffers returns the number of buffers read.
func (r *miniMallocReader) Buffers() int { return len(r.bufs) }

// Close releases the buffers, and closes the file the reader was opened
// from, if it owns one.
func (r *miniMallocReader) Close() error {
	r.bufs, r.allocs, r.frees = nil, nil, nil
	r.ai, r.fi = 0, 0
	return r.checker.Close()
}
