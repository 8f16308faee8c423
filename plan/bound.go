package plan

import (
	"cmp"
	"context"
	"slices"
	"time"
)

// A windowProver raises the lower bound by proofs on windows of time: the
// buffers live during a window [t0, t1), their lifetimes cut to it, are a
// relaxation of the problem (a placement of all the buffers within a
// height, restricted to those buffers and that time, is a placement of
// the window's within the same height), so a height that the exact search
// proves infeasible for the window is infeasible for the whole problem.
// A window has few buffers where the whole problem has too many for the
// search, and one around the peak of live bytes holds what keeps the
// optimum above the peak there, when something does.
//
// It works around a few centers, the times of highest live bytes apart
// from one another; the window of a center widens each time its
// subproblem has a placement at the bound (a wider window is a larger
// relaxation, so its optimum is as high or higher), up to maxProofBuffers
// buffers; the node budget doubles each round of the centers.
type windowProver struct {
	bufs    []Buffer
	workers int
	times   []int64 // the distinct ends of lifetimes, sorted
	centers []int   // elementary intervals of time, highest live bytes first
	width   []int   // per center: the half-width of its next window, in elementary intervals
	full    []bool  // per center: its window cannot widen any more
	next    int     // the center of the next step
	budget  int64
}

// maxProofBuffers is the most buffers of a window's subproblem.
const maxProofBuffers = 2000

// newWindowProver prepares the proofs on windows of bufs.
func newWindowProver(bufs []Buffer, workers int) *windowProver {
	w := &windowProver{bufs: bufs, workers: workers, budget: 1 << 12}
	w.times = make([]int64, 0, 2*len(bufs))
	for _, b := range bufs {
		w.times = append(w.times, b.Lower, b.Upper)
	}
	slices.Sort(w.times)
	w.times = slices.Compact(w.times)
	nsec := len(w.times) - 1
	if nsec < 1 {
		return w
	}
	// The live bytes of each elementary interval, by the changes at its
	// start.
	delta := make([]int64, nsec+1)
	for _, b := range bufs {
		lo, _ := slices.BinarySearch(w.times, b.Lower)
		hi, _ := slices.BinarySearch(w.times, b.Upper)
		delta[lo] += b.Size
		delta[hi] -= b.Size
	}
	load := make([]int64, nsec)
	var live int64
	for k := range nsec {
		live += delta[k]
		load[k] = live
	}
	bySize := make([]int32, nsec)
	inOrder(bySize, func(a, b int32) int { return cmp.Compare(load[b], load[a]) })
	// Up to four centers, each at least a sixteenth of time from the
	// others.
	apart := max(nsec/16, 1)
	for _, k := range bySize {
		if len(w.centers) == 4 {
			break
		}
		if !slices.ContainsFunc(w.centers, func(c int) bool { return abs(c-int(k)) < apart }) {
			w.centers = append(w.centers, int(k))
		}
	}
	w.width = make([]int, len(w.centers))
	w.full = make([]bool, len(w.centers))
	for i := range w.width {
		w.width[i] = 1
	}
	return w
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// window returns the subproblem of center c with half-width hw: the
// buffers live in the window, cut to it.
func (w *windowProver) window(c, hw int) []Buffer {
	t0, t1 := w.times[max(c-hw, 0)], w.times[min(c+hw+1, len(w.times)-1)]
	var sub []Buffer
	for _, b := range w.bufs {
		if b.Lower < t1 && t0 < b.Upper {
			sub = append(sub, Buffer{Lower: max(b.Lower, t0), Upper: min(b.Upper, t1), Size: b.Size})
		}
	}
	return sub
}

// step makes the proofs of one window, heights from proven up to best-1,
// and returns the new proven bound (proven when nothing was proved). It
// returns early when ctx is done or at until.
func (w *windowProver) step(ctx context.Context, proven, best int64, until time.Time) int64 {
	if len(w.centers) == 0 || proven >= best {
		return proven
	}
	i := w.next
	w.next = (w.next + 1) % len(w.centers)
	if w.next == 0 {
		w.budget *= 2
	}
	c := w.centers[i]
	sub := w.window(c, w.width[i])
	for !w.full[i] && len(sub) > maxProofBuffers {
		// Too wide: back to the last width that was not.
		w.width[i] = max((w.width[i]-1)/2, 1)
		w.full[i] = true
		sub = w.window(c, w.width[i])
	}
	if len(sub) > maxProofBuffers {
		return proven
	}
	pl := newPool(ctx, sub, w.workers)
	if pl == nil {
		w.full[i] = true
		return proven
	}
	up := best - 1
	for h := proven; proven <= up && ctx.Err() == nil; {
		out, _ := pl.solveUntil(h, w.budget, until)
		switch out {
		case infeasible:
			proven = h + 1
		case found:
			if h == proven && !w.full[i] {
				// No proof here at the bound: widen the window for
				// the next time.
				nw := 2*w.width[i] + 1
				if nw >= len(w.times) {
					w.full[i] = true
				}
				w.width[i] = nw
			}
			up = h - 1
		default:
			return proven
		}
		h = proven + (up-proven)/2
	}
	return proven
}
