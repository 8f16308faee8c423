// Package devicecost estimates the time a memory strategy spends in device
// calls on a real GPU, from a table of each driver call's cost by size as
// measured on that GPU.
//
// A [Model] holds the table: for each [Call], the cost in nanoseconds at
// measured sizes, linear between powers of two (the sizes a table should
// be measured at) and flat below the smallest size measured, rising past
// the largest with the slope of the last two. A [Tally] counts the calls of
// a replay by call and power-of-two size class, in O(1) and without
// allocating, so that the estimate costs the replay loop two additions a
// device call; [Tally.Estimate] then applies a model, exactly as if each
// call had been costed on its own.
//
// [H200] is the table measured on an NVIDIA H200 (driver 580.159.04, CUDA
// 13.0), the estimate every replay reports as device_time_ns_est unless
// another table is given. A table for another GPU is written by the cuda
// backend's benchmark:
//
//	GPUALLOC_DEVICE_COSTS=mygpu.csv go test ./backend/cuda -run '^$' -bench 'DeviceCalls/(Malloc|Virtual)'
//
// The benchmark measures calls as a pool makes them: allocations live
// together, then freed, with the driver left time to clear freed memory.
// On the bundled traces, replayed through the H200 with every strategy
// (44 replays, five runs), the estimate came within 30% of the mean time
// the calls took on 29, within a factor of 1.4 on 34, and 7% above it in
// all, where the runs' own totals ranged over 30% (BENCHMARKS.md).
// The other 11 are buddy's, dualcursor's and BFC's, whose few large
// regions come out 2.5 to 4.5 times too dear: memory that the process
// never used is cheaper to allocate (about 0.15 ms a GiB, against the
// table's 0.44 ms). The estimate is of an idle device: cuMemFree_v2 waits
// for the work queued on the device, which a trace does not record.
package devicecost

import (
	"bufio"
	"bytes"
	"cmp"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"slices"
	"strconv"
	"strings"
)

// A Call is a kind of device call that a replay counts.
type Call uint8

// The calls a replay's strategy makes through its backend.
const (
	Malloc    Call = iota // Backend.Malloc: cuMemAlloc_v2
	Free                  // Backend.Free: cuMemFree_v2
	Reserve               // VirtualMemory.Reserve: cuMemAddressReserve
	Unreserve             // VirtualMemory.Unreserve: cuMemAddressFree
	Create                // VirtualMemory.Create: cuMemCreate
	Release               // VirtualMemory.Release: cuMemRelease
	Map                   // VirtualMemory.Map: cuMemMap and cuMemSetAccess
	Unmap                 // VirtualMemory.Unmap: cuMemUnmap
	numCalls
)

// driverCalls are the driver functions of a table, by the Call whose cost
// they make up (Map is two).
var driverCalls = map[string]Call{
	"cuMemAlloc":          Malloc,
	"cuMemFree":           Free,
	"cuMemAddressReserve": Reserve,
	"cuMemAddressFree":    Unreserve,
	"cuMemCreate":         Create,
	"cuMemRelease":        Release,
	"cuMemMap":            Map,
	"cuMemSetAccess":      Map,
	"cuMemUnmap":          Unmap,
}

// Header is the header line of a table.
const Header = "call,size_bytes,ns"

// classes is the number of power-of-two size classes: class k holds sizes
// in [2^k, 2^(k+1)), class 0 also size 0.
const classes = 64

// A line is the cost of a size class: a + b*size nanoseconds.
type line struct{ a, b float64 }

// A Model is a table of device-call costs by size, for one GPU.
type Model struct {
	// GPU names the GPU the table was measured on, from the table's
	// "# gpu:" comment ("" if it has none).
	GPU   string
	lines [numCalls][classes]line
}

// Cost returns the estimated nanoseconds of one call of c with size bytes.
func (m *Model) Cost(c Call, size int64) float64 {
	l := m.lines[c][class(size)]
	return l.a + l.b*float64(size)
}

// class returns the power-of-two class of size.
func class(size int64) int {
	if size <= 1 {
		return 0
	}
	return bits.Len64(uint64(size)) - 1
}

// A point is a measured cost.
type point struct {
	size int64
	ns   float64
}

// MaxCost is the highest cost, in nanoseconds, that a table may give a
// call: 1000 s, far above any driver call's, and low enough that a
// replay's calls add up within an int64 (see [Tally.Estimate]).
const MaxCost = 1e12

// maxLine is the longest line Parse reads.
const maxLine = 64 << 10

// A ParseError is a table that Parse refuses: the line at fault (0 for
// the table as a whole) and what is wrong with it, naming the column.
type ParseError struct {
	Line int
	Msg  string
}

func (e *ParseError) Error() string {
	if e.Line == 0 {
		return e.Msg
	}
	return fmt.Sprintf("line %d: %s", e.Line, e.Msg)
}

// Parse reads a table: lines of call,size_bytes,ns after the header
// [Header], a call being one of cuMemAlloc, cuMemFree, cuMemAddressReserve,
// cuMemAddressFree, cuMemCreate, cuMemRelease, cuMemMap, cuMemSetAccess and
// cuMemUnmap, each at least once, and ns at most [MaxCost]. Blank lines
// and lines starting with # are comments; "# gpu: NAME" names the GPU. A
// UTF-8 byte order mark before the first line is skipped. A bad line, or
// one longer than 64 KiB, is a [*ParseError] that names it.
func Parse(r io.Reader) (*Model, error) {
	m := &Model{}
	pts := map[string][]point{}
	type measured struct {
		call string
		size int64
	}
	seen := map[measured]bool{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxLine)
	header := false
	bad := func(n int, format string, args ...any) error {
		return &ParseError{Line: n, Msg: fmt.Sprintf(format, args...)}
	}
	n := 1
	for ; sc.Scan(); n++ {
		line := sc.Text()
		if n == 1 {
			line = strings.TrimPrefix(line, "\ufeff") // byte order mark
		}
		text := strings.TrimSpace(line)
		switch {
		case text == "":
			continue
		case strings.HasPrefix(text, "#"):
			if gpu, ok := strings.CutPrefix(text, "# gpu:"); ok {
				m.GPU = strings.TrimSpace(gpu)
			}
			continue
		case !header:
			if text != Header {
				return nil, bad(n, "header %q, want %q", text, Header)
			}
			header = true
			continue
		}
		f := strings.Split(text, ",")
		if len(f) != 3 {
			return nil, bad(n, "%d fields, want 3 (%s)", len(f), Header)
		}
		if _, ok := driverCalls[f[0]]; !ok {
			return nil, bad(n, "unknown call %q", f[0])
		}
		size, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil || size < 1 {
			return nil, bad(n, "size_bytes %q is not a positive whole number", f[1])
		}
		ns, err := strconv.ParseFloat(f[2], 64)
		switch {
		case err != nil && !errors.Is(err, strconv.ErrRange), ns < 0, math.IsNaN(ns):
			return nil, bad(n, "ns %q is not a non-negative number", f[2])
		case ns > MaxCost:
			return nil, bad(n, "ns %q is more than 1e12 (1000 s for one call): the costs of a replay's calls could not be added up", f[2])
		}
		if seen[measured{f[0], size}] {
			return nil, bad(n, "a second cost of %s at %d bytes", f[0], size)
		}
		seen[measured{f[0], size}] = true
		pts[f[0]] = append(pts[f[0]], point{size, ns})
	}
	if err := sc.Err(); errors.Is(err, bufio.ErrTooLong) {
		return nil, bad(n, "longer than %d KiB: not a table of costs", maxLine>>10)
	} else if err != nil {
		return nil, err
	}
	if !header {
		return nil, bad(0, "no header %q", Header)
	}
	var missing []string
	for name := range driverCalls {
		if len(pts[name]) == 0 {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return nil, bad(0, "no cost of %s", strings.Join(missing, ", "))
	}
	for name, p := range pts {
		c := driverCalls[name]
		slices.SortFunc(p, func(x, y point) int { return cmp.Compare(x.size, y.size) })
		for k := range classes {
			lo, hi := float64(uint64(1)<<k), float64(uint64(1)<<k)*2
			if k == 0 {
				lo = 0
			}
			y0, y1 := interpolate(p, lo), interpolate(p, hi)
			b := (y1 - y0) / (hi - lo)
			m.lines[c][k].a += y0 - b*lo
			m.lines[c][k].b += b
		}
	}
	return m, nil
}

// interpolate returns the cost at size x of the measured points p, sorted
// by size: linear between points, flat below the first, and past the
// last with the slope of the last two (never falling).
func interpolate(p []point, x float64) float64 {
	i, _ := slices.BinarySearchFunc(p, x, func(q point, x float64) int {
		switch s := float64(q.size); {
		case s < x:
			return -1
		case s > x:
			return 1
		}
		return 0
	})
	switch {
	case i == 0:
		return p[0].ns
	case i < len(p):
		a, b := p[i-1], p[i]
		return a.ns + (b.ns-a.ns)*(x-float64(a.size))/float64(b.size-a.size)
	case len(p) == 1:
		return p[0].ns
	}
	a, b := p[len(p)-2], p[len(p)-1]
	slope := max(0, (b.ns-a.ns)/float64(b.size-a.size))
	return b.ns + slope*(x-float64(b.size))
}

//go:embed h200.csv
var h200 []byte

// H200 is the table measured on an NVIDIA H200 (see the package doc).
var H200 = func() *Model {
	m, err := Parse(bytes.NewReader(h200))
	if err != nil {
		panic("devicecost: h200.csv: " + err.Error())
	}
	return m
}()

// A Tally counts device calls by Call and power-of-two size class. The zero
// Tally is empty and ready to use.
type Tally struct {
	n, bytes [numCalls][classes]int64
	// more holds the bytes of a class that would have overflowed bytes
	// (calls of exbibytes), moved there from bytes.
	more [numCalls][classes]float64
}

// Add counts one call of c with size bytes: O(1), no allocation.
func (t *Tally) Add(c Call, size int64) {
	k := class(size)
	t.n[c][k]++
	if t.bytes[c][k] > math.MaxInt64-size {
		t.more[c][k] += float64(t.bytes[c][k])
		t.bytes[c][k] = 0
	}
	t.bytes[c][k] += size
}

// Estimate returns the nanoseconds the calls counted take by m, rounded to
// the nearest nanosecond. An estimate beyond what an int64 holds (about
// 292 years: calls of sizes far past the table's largest, whose costs
// grow with the last slope) saturates at math.MaxInt64.
func (t *Tally) Estimate(m *Model) int64 {
	var ns float64
	for c := range numCalls {
		for k := range classes {
			if n := t.n[c][k]; n > 0 {
				l := m.lines[c][k]
				ns += l.a*float64(n) + l.b*(float64(t.bytes[c][k])+t.more[c][k])
			}
		}
	}
	if ns >= math.MaxInt64 { // 2^63 as a float64: the first value past the int64s
		return math.MaxInt64
	}
	return int64(math.Round(ns))
}
