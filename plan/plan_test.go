package plan

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc/traces"
)

// solveChecked solves p and checks the placement, as every test does with
// every placement it gets.
func solveChecked(t *testing.T, p Problem, opts Options) Solution {
	t.Helper()
	s, err := Solve(context.Background(), p, opts)
	require.NoError(t, err)
	require.NoError(t, Check(p, s.Placements(p), opts.Capacity))
	require.Equal(t, heightOf(p.Buffers, s.Offsets), s.Height)
	require.GreaterOrEqual(t, s.Height, s.LowerBound)
	require.Equal(t, LowerBound(p.Buffers), s.LowerBound)
	if s.Height == s.LowerBound {
		require.True(t, s.Optimal)
	}
	return s
}

func buf(id string, lo, hi, size int64) Buffer {
	return Buffer{ID: id, Lower: lo, Upper: hi, Size: size}
}

func TestCheck(t *testing.T) {
	p := Problem{Buffers: []Buffer{buf("a", 0, 4, 10), buf("b", 2, 6, 5), buf("c", 4, 8, 10)}}
	good := []Placement{{p.Buffers[0], 0}, {p.Buffers[1], 10}, {p.Buffers[2], 0}}
	require.NoError(t, Check(p, good, 15))
	require.NoError(t, Check(p, good, 0))
	for _, tc := range []struct {
		name   string
		edit   func(q []Placement) []Placement
		cap    int64
		errSub string
	}{
		{"overlap in time and memory", func(q []Placement) []Placement { q[1].Offset = 5; return q }, 0, `"a" ([0, 4) at 0) and "b" ([2, 6) at 5) overlap`},
		{"beyond capacity", func(q []Placement) []Placement { return q }, 14, `"b": [10, 15) ends beyond the capacity 14`},
		{"negative", func(q []Placement) []Placement { q[0].Offset = -1; return q }, 0, "negative offset"},
		{"missing", func(q []Placement) []Placement { return q[:2] }, 0, `"c" is not placed`},
		{"twice", func(q []Placement) []Placement { return append(q, q[0]) }, 0, `"a" is placed twice`},
		{"unknown", func(q []Placement) []Placement { q[2].ID = "z"; return q }, 0, `"z" is not in the problem`},
		{"lifetime changed", func(q []Placement) []Placement { q[2].Lower = 5; return q }, 0, `"c": lifetime [5, 8) size 10, want [4, 8) size 10`},
		{"size changed", func(q []Placement) []Placement { q[2].Size = 1; return q }, 0, "want [4, 8) size 10"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := tc.edit(append([]Placement(nil), good...))
			err := Check(p, q, tc.cap)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.errSub)
		})
	}
	// Half-open lifetimes: a buffer ending at 4 and one starting at 4 may
	// share memory.
	require.NoError(t, Check(p, []Placement{{p.Buffers[0], 0}, {p.Buffers[1], 10}, {p.Buffers[2], 0}}, 15))
}

func TestLowerBound(t *testing.T) {
	assert.Equal(t, int64(0), LowerBound(nil))
	assert.Equal(t, int64(15), LowerBound([]Buffer{buf("a", 0, 4, 10), buf("b", 2, 6, 5), buf("c", 4, 8, 10)}))
	// [0,4) and [4,8) never live together.
	assert.Equal(t, int64(10), LowerBound([]Buffer{buf("a", 0, 4, 10), buf("c", 4, 8, 10)}))
}

// randomProblem returns n buffers with lifetimes in [0, span) and sizes in
// [1, maxSize].
func randomProblem(rng *rand.Rand, n int, span, maxSize int64) Problem {
	p := Problem{Buffers: make([]Buffer, n)}
	for i := range p.Buffers {
		lo := rng.Int64N(span - 1)
		hi := lo + 1 + rng.Int64N(span-lo-1)
		p.Buffers[i] = buf(fmt.Sprint(i), lo, hi, 1+rng.Int64N(maxSize))
	}
	return p
}

// bruteForce returns the lowest height first fit reaches over every order
// of the buffers: an upper bound of the optimum.
func bruteForce(bufs []Buffer) int64 {
	n := len(bufs)
	perm := make([]int, n)
	for i := range perm {
		perm[i] = i
	}
	best := int64(-1)
	off := make([]int64, n)
	var rec func(k int)
	rec = func(k int) {
		if k == n {
			h := int64(0)
			for i, b := range bufs {
				h = max(h, off[i]+b.Size)
			}
			if best < 0 || h < best {
				best = h
			}
			return
		}
		for i := k; i < n; i++ {
			perm[k], perm[i] = perm[i], perm[k]
			b := bufs[perm[k]]
			// Lowest offset clear of the placed buffers live with b.
			o := int64(0)
			for moved := true; moved; {
				moved = false
				for _, j := range perm[:k] {
					c := bufs[j]
					if c.Lower < b.Upper && b.Lower < c.Upper && off[j] < o+b.Size && o < off[j]+c.Size {
						o, moved = off[j]+c.Size, true
					}
				}
			}
			off[perm[k]] = o
			rec(k + 1)
			perm[k], perm[i] = perm[i], perm[k]
		}
	}
	rec(0)
	return best
}

func TestSolveRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 300 {
		n := 1 + rng.IntN(60)
		p := randomProblem(rng, n, 2+rng.Int64N(40), 1+rng.Int64N(100))
		s := solveChecked(t, p, Options{TimeLimit: 200 * time.Millisecond})
		h := solveChecked(t, p, Options{NoSearch: true})
		require.LessOrEqual(t, s.Height, h.Height, "case %d: the search made it worse", i)
	}
}

func TestSearchBeatsEveryOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 150 {
		p := randomProblem(rng, 2+rng.IntN(6), 2+rng.Int64N(8), 1+rng.Int64N(20))
		s := solveChecked(t, p, Options{TimeLimit: 2 * time.Second})
		require.True(t, s.Optimal, "case %d: %+v", i, p)
		require.LessOrEqual(t, s.Height, bruteForce(p.Buffers), "case %d: %+v", i, p)
	}
}

func TestTightSolvedAtLowerBound(t *testing.T) {
	for _, n := range []int{10, 30, 60, 100} {
		for seed := range 3 {
			p := Tight(n, 1<<20, 1<<12, rand.New(rand.NewPCG(uint64(seed), uint64(n))))
			require.Equal(t, int64(1<<20), LowerBound(p.Buffers), "a tiling's lower bound is its height")
			s := solveChecked(t, p, Options{TimeLimit: 10 * time.Second})
			assert.Equal(t, int64(1<<20), s.Height, "n=%d seed=%d", n, seed)
			assert.True(t, s.Optimal)
			// Within the capacity, as MiniMalloc is asked.
			solveChecked(t, p, Options{Capacity: 1 << 20, TimeLimit: 10 * time.Second})
		}
	}
}

func TestSolveCapacity(t *testing.T) {
	// a and b live together, then b and c: 12 bytes at most.
	p := Problem{Buffers: []Buffer{buf("a", 0, 2, 6), buf("b", 0, 4, 6), buf("c", 2, 4, 4)}}
	s := solveChecked(t, p, Options{Capacity: 12})
	assert.Equal(t, int64(12), s.Height)
	_, err := Solve(context.Background(), p, Options{Capacity: 11})
	require.ErrorIs(t, err, ErrNoPlacement)
	assert.Contains(t, err.Error(), "12 bytes live at once, more than the capacity 11")

	// The heuristics leave gaps in a tiling; without the search there is
	// no placement at its height.
	q := Tight(100, 1<<20, 1<<12, rand.New(rand.NewPCG(0, 100)))
	h := solveChecked(t, q, Options{NoSearch: true})
	require.Greater(t, h.Height, h.LowerBound)
	assert.False(t, h.Optimal)
	_, err = Solve(context.Background(), q, Options{Capacity: 1 << 20, NoSearch: true})
	require.ErrorIs(t, err, ErrNoPlacement)
	assert.Contains(t, err.Error(), "the search is off")
	solveChecked(t, q, Options{Capacity: h.Height, NoSearch: true})
}

func TestSolveStops(t *testing.T) {
	p := Tight(500, 1<<20, 1<<16, rand.New(rand.NewPCG(2, 500)))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Solve(ctx, p, Options{})
	require.ErrorIs(t, err, context.Canceled)

	// A short limit still gives the first heuristic's placement.
	s := solveChecked(t, p, Options{TimeLimit: time.Millisecond})
	assert.Less(t, s.Elapsed, 5*time.Second)
}

func TestSolveEmptyAndInvalid(t *testing.T) {
	s := solveChecked(t, Problem{}, Options{})
	assert.True(t, s.Optimal)
	assert.Equal(t, int64(0), s.Height)
	_, err := Solve(context.Background(), Problem{Buffers: []Buffer{buf("x", 3, 3, 1)}}, Options{})
	require.EqualError(t, err, "plan: buffer 0 (x): empty lifetime [3, 3)")
	_, err = Solve(context.Background(), Problem{Buffers: []Buffer{buf("x", 3, 4, 0)}}, Options{})
	require.EqualError(t, err, "plan: buffer 0 (x): size 0, want > 0")
}

func TestFromTrace(t *testing.T) {
	const trace = `op,id,size,device
alloc,7,100,0
alloc,8,50,1
free,7,,0
release,,,0
alloc,7,30,0
free,8,,1
`
	r, err := traces.NewReader(strings.NewReader(trace), "t.csv", traces.Options{})
	require.NoError(t, err)
	probs, err := FromTrace(r)
	require.NoError(t, err)
	require.Len(t, probs, 2)
	assert.Equal(t, 0, probs[0].Device)
	// The release is an event of the trace, and no buffer.
	assert.Equal(t, []Buffer{buf("7", 0, 2, 100), buf("7.1", 4, 6, 30)}, probs[0].Buffers)
	assert.Equal(t, 1, probs[1].Device)
	assert.Equal(t, []Buffer{buf("8", 1, 5, 50)}, probs[1].Buffers)
}

func TestFromMiniMalloc(t *testing.T) {
	const in = "buffer,start,end,size\nb0,0,2,4\n7,3,3,8\n"
	r, err := traces.NewReader(strings.NewReader(in), "mm.csv", traces.Options{})
	require.NoError(t, err)
	p, ok := FromMiniMalloc(r)
	require.True(t, ok)
	// end is inclusive: upper = end + 1.
	assert.Equal(t, []Buffer{buf("b0", 0, 3, 4), buf("7", 3, 4, 8)}, p.Buffers)
}

func TestPlacementsRoundTrip(t *testing.T) {
	p := Tight(40, 1000, 100, rand.New(rand.NewPCG(5, 6)))
	s := solveChecked(t, p, Options{})
	var b bytes.Buffer
	require.NoError(t, WritePlacements(&b, s.Placements(p)))
	assert.True(t, strings.HasPrefix(b.String(), "id,lower,upper,size,offset\n"))
	got, err := ReadPlacements(&b, "out.csv")
	require.NoError(t, err)
	assert.Equal(t, s.Placements(p), got)
	require.NoError(t, Check(p, got, 1000))
}

func TestReadPlacementsErrors(t *testing.T) {
	for _, tc := range []struct{ in, err string }{
		{"", "p.csv: empty input, want a header id,lower,upper,size,offset"},
		{"id,lower,upper,size\n", "p.csv:1: header has no offset column (want id,lower,upper,size,offset)"},
		{"id,id,lower,upper,size,offset\n", `p.csv:1: column "id" appears twice in header`},
		{"id,lower,upper,size,offset\na,0,1,x,0\n", `p.csv:2: bad size "x": not a number`},
		{"id,lower,upper,size,offset\na,0,1,2\n", "p.csv:2: got 4 fields, want 5"},
		{"id,lower,upper,size,offset\n,0,1,2,0\n", "p.csv:2: missing id"},
		{"id,lower,upper,size,offset\n\"a,0,1,2,0\n", `p.csv:2: extraneous or missing " in quoted-field`},
	} {
		_, err := ReadPlacements(strings.NewReader(tc.in), "p.csv")
		assert.EqualError(t, err, tc.err, "input %q", tc.in)
	}
	// MiniMalloc's alignment column is read past.
	got, err := ReadPlacements(strings.NewReader("id,lower,upper,size,alignment,offset\na,0,1,2,4,8\n"), "p.csv")
	require.NoError(t, err)
	assert.Equal(t, []Placement{{buf("a", 0, 1, 2), 8}}, got)
}

func FuzzReadPlacements(f *testing.F) {
	f.Add("id,lower,upper,size,offset\nb0,0,3,4096,0\nb1,3,9,1024,0\n")
	f.Add("offset,size,upper,lower,id,alignment\n0,1,2,0,x,1\n")
	f.Add("id,lower,upper,size,offset\n\"a\"\"b\",0,1,2,3\n")
	f.Fuzz(func(t *testing.T, in string) {
		got, err := ReadPlacements(strings.NewReader(in), "f.csv")
		if err != nil {
			if strings.Contains(err.Error(), "\n") || !strings.HasPrefix(err.Error(), "f.csv:") {
				t.Fatalf("error not one line naming the input: %q", err)
			}
			return
		}
		// What was read writes and reads back the same, when the ids are
		// plain tokens.
		for _, q := range got {
			if strings.ContainsAny(q.ID, ",\"\r\n") || strings.TrimSpace(q.ID) != q.ID {
				return
			}
		}
		var b bytes.Buffer
		require.NoError(t, WritePlacements(&b, got))
		again, err := ReadPlacements(&b, "f.csv")
		require.NoError(t, err)
		if len(got) == 0 {
			require.Empty(t, again)
			return
		}
		require.Equal(t, got, again)
	})
}

func TestWriteProblemReadsBack(t *testing.T) {
	p := Problem{Buffers: []Buffer{buf("b0", 0, 3, 4096), buf("x", 2, 9, 1)}}
	var b bytes.Buffer
	require.NoError(t, WriteProblem(&b, p))
	assert.Equal(t, "id,lower,upper,size\nb0,0,3,4096\nx,2,9,1\n", b.String())
	r, err := traces.NewReader(&b, "mm.csv", traces.Options{})
	require.NoError(t, err)
	assert.Equal(t, "MiniMalloc CSV", r.Format())
	got, ok := FromMiniMalloc(r)
	require.True(t, ok)
	assert.Equal(t, p, got)
	_, ok = FromMiniMalloc(traces.NewSliceReader("events", nil))
	assert.False(t, ok, "not a MiniMalloc CSV")
}

// TestSizesNearMaxInt64 checks that sizes whose sum passes 2^63-1 are
// refused rather than wrapped, and that the largest problem that fits is
// placed correctly.
func TestSizesNearMaxInt64(t *testing.T) {
	const big = math.MaxInt64
	p := Problem{Buffers: []Buffer{buf("a", 0, 2, big), buf("b", 1, 3, big)}}
	_, err := Solve(context.Background(), p, Options{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `buffer 1 (b): the sizes of the buffers up to it add up to more than 2^63-1 bytes`)
	// Apart in time they do not need more, but the sum is refused all
	// the same: Solve's heights are bounded by it.
	p = Problem{Buffers: []Buffer{buf("a", 0, 1, big/2+1), buf("b", 1, 2, big/2+1)}}
	require.Error(t, p.Validate())
	// Exactly 2^63-1 in all: placed, one above the other.
	p = Problem{Buffers: []Buffer{buf("a", 0, 2, big/2), buf("b", 1, 3, big/2+1)}}
	s := solveChecked(t, p, Options{})
	assert.Equal(t, int64(big), s.Height)
	assert.True(t, s.Optimal)
	assert.Equal(t, int64(big), LowerBound(p.Buffers))
	// LowerBound saturates on what Validate refuses.
	assert.Equal(t, int64(big), LowerBound([]Buffer{buf("a", 0, 2, big), buf("b", 1, 3, big)}))
}

// TestCheckOverflow checks that Check refuses an offset whose end passes
// 2^63-1 rather than wrapping into a false "no overlap".
func TestCheckOverflow(t *testing.T) {
	p := Problem{Buffers: []Buffer{buf("a", 0, 2, math.MaxInt64), buf("b", 1, 3, math.MaxInt64)}}
	err := Check(p, []Placement{{p.Buffers[0], 0}, {p.Buffers[1], math.MaxInt64}}, 0)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `buffer "b": offset 9223372036854775807 + size 9223372036854775807 is beyond 2^63-1 bytes`)
}

// TestSolveOutOfTime checks that Solve with no time left still gives a
// whole, valid placement: the first heuristic's, or the stack placement.
func TestSolveOutOfTime(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	p := randomProblem(rng, 5000, 20000, 1<<20)
	s, err := Solve(context.Background(), p, Options{TimeLimit: time.Nanosecond})
	require.NoError(t, err)
	require.NoError(t, Check(p, s.Placements(p), 0))
	assert.Contains(t, []string{"time/firstfit", "time/stack"}, s.Method)
	assert.Equal(t, heightOf(p.Buffers, s.Offsets), s.Height)
}

// TestSearchDownWithoutCapacity checks that without a capacity the search
// goes below the heuristics: on tight instances whose heuristics are above
// the lower bound it reaches the lower bound (the optimum), with one core
// and with two, by the exact search or the large-neighbourhood moves that
// take turns with it.
func TestSearchDownWithoutCapacity(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	tried := 0
	for i := 0; tried < 6 && i < 200; i++ {
		p := Tight(30, 1<<10, 1<<10, rng)
		h := solveChecked(t, p, Options{NoSearch: true})
		if h.Height == h.LowerBound {
			continue
		}
		tried++
		for _, w := range []int{1, 2} {
			var seen []Progress
			s := solveChecked(t, p, Options{Workers: w, TimeLimit: time.Minute, Progress: func(g Progress) { seen = append(seen, g) }})
			assert.Equal(t, s.LowerBound, s.Height, "case %d, %d workers", i, w)
			assert.True(t, s.Optimal)
			assert.Contains(t, []string{"search", "lns"}, s.Method)
			require.NotEmpty(t, seen)
			assert.Equal(t, "search", seen[len(seen)-1].Phase)
			assert.Equal(t, s.Height, seen[len(seen)-1].Height)
		}
	}
	require.Equal(t, 6, tried)
}

// TestSearchDownProvesOptimum checks, against brute force, that the
// descent ends at the optimum and says so, with one core and with two.
func TestSearchDownProvesOptimum(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for i := range 300 {
		p := randomProblem(rng, 5+rng.IntN(3), 3+rng.Int64N(6), 1+rng.Int64N(20))
		opt := bruteForce(p.Buffers)
		s := solveChecked(t, p, Options{Workers: 1 + i%2, TimeLimit: time.Minute})
		require.Equal(t, opt, s.Height, "case %d: %+v", i, p)
		require.True(t, s.Optimal, "case %d", i)
	}
}
