package plan

import (
	"context"
	"errors"
	"math/bits"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A stepCtx is a context whose deadline is a number of checks rather
// than a time: Err reports DeadlineExceeded from its (n+1)-th call on, so
// that a test of where the time is checked does not depend on how fast
// the machine is.
type stepCtx struct {
	context.Context
	left  atomic.Int64
	calls atomic.Int64
	once  sync.Once
	done  chan struct{}
}

func newStepCtx(n int64) *stepCtx {
	c := &stepCtx{Context: context.Background(), done: make(chan struct{})}
	c.left.Store(n)
	return c
}

func (c *stepCtx) Err() error {
	c.calls.Add(1)
	if c.left.Add(-1) < 0 {
		c.once.Do(func() { close(c.done) })
		return context.DeadlineExceeded
	}
	return nil
}

func (c *stepCtx) Done() <-chan struct{} { return c.done }

// TestSearchChecksItsDeadline runs the exact search, without a node
// budget, on a problem of the SOMAS shape at its lower bound (which it
// neither places nor refutes quickly) with deadlines of 1 to 100 checks:
// it stops at the first check past the deadline, and between two checks
// it does at most checkEvery steps and then one step's work: a node (its
// buffers and a few passes over its sections), the sort of a part (the
// sections of its buffers), or ranking the buffers. That is linear in the
// problem's buffers and sections, not in the nodes of the search.
func TestSearchChecksItsDeadline(t *testing.T) {
	p := somasProblem(1500, 3)
	s := newSearcher(context.Background(), p.Buffers)
	require.NotNil(t, s)
	n, nsec := int64(len(p.Buffers)), int64(len(s.floor))
	var widths int64
	for i := range p.Buffers {
		widths += int64(s.secHi[i] - s.secLo[i])
	}
	for _, k := range []int64{1, 10, 50} {
		ctx := newStepCtx(k)
		s.ctx, s.ranks, s.maxWork = ctx, nil, 0
		require.Equal(t, stopped, s.solve(LowerBound(p.Buffers)), "deadline of %d checks", k)
		assert.Equal(t, k+1, ctx.calls.Load(), "checks made")
		assert.LessOrEqual(t, s.maxWork, checkEvery+widths+16*(n+nsec)+n*int64(bits.Len(uint(n))))
	}
}

// TestSolveEndsWithItsContext cancels Solve's context as the search
// starts, with an hour of time limit, on problems the search cannot end:
// every phase after it must see the context and return its error.
func TestSolveEndsWithItsContext(t *testing.T) {
	for _, p := range []Problem{somasProblem(2000, 4), padded()} {
		ctx, cancel := context.WithCancel(context.Background())
		_, err := Solve(ctx, p, Options{TimeLimit: time.Hour, Progress: func(g Progress) {
			if g.Phase == "search" {
				cancel()
			}
		}})
		require.True(t, errors.Is(err, context.Canceled), "%v", err)
		cancel()
	}
}

// TestLNSKeepsPlacementsValid makes many moves on random problems: every
// placement they leave passes Check within the height, which never goes
// up, and some buffer always reaches it.
func TestLNSKeepsPlacementsValid(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	lowered := 0
	for c := range 100 {
		p := randomProblem(rng, 5+rng.IntN(150), 2+rng.Int64N(60), 1+rng.Int64N(100))
		s := solveChecked(t, p, Options{NoSearch: true})
		x := newLNS(p.Buffers, s.Offsets, uint64(c))
		h := x.height
		for m := range 200 {
			require.NotEmpty(t, x.hot, "case %d move %d", c, m)
			x.move()
			require.LessOrEqual(t, x.height, h, "case %d move %d", c, m)
			h = x.height
			require.Equal(t, heightOf(p.Buffers, x.off), x.height)
			require.NoError(t, Check(p, (&Solution{Offsets: x.off}).Placements(p), x.height), "case %d move %d", c, m)
		}
		if h < s.Height {
			lowered++
		}
	}
	assert.Positive(t, lowered, "moves that lowered a greedy placement")
}
