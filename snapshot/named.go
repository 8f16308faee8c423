package snapshot

import "slices"

// named knows, for each address that an alloc or free_completed entry of
// a trace names, the first such entry: the entries not undone yet, those
// before now, name it when that one is before now. While a block live
// before the trace is live, those addresses are the starts of other
// blocks.
type named struct {
	addrs []uint64 // in increasing order
	first []int32  // for each of addrs, the index of the first entry naming it
	least []int32  // for each run of namedRun of first, its least
	now   int32    // the walk's position: entries before it are not undone
}

// namedRun is the length of the runs of named.first whose least is kept,
// so that firstIn passes over a run of addresses all named after now at
// once.
const namedRun = 64

func newNamed(t Trace) *named {
	firsts := map[uint64]int32{}
	for i := range t.Len() {
		if a := t.Action(i); a == Alloc || a == FreeCompleted {
			addr := t.At(i).Addr
			if _, seen := firsts[addr]; !seen {
				firsts[addr] = int32(i)
			}
		}
	}
	n := &named{addrs: make([]uint64, 0, len(firsts)), first: make([]int32, 0, len(firsts)), now: int32(t.Len())}
	for a := range firsts {
		n.addrs = append(n.addrs, a)
	}
	slices.Sort(n.addrs)
	for i, a := range n.addrs {
		f := firsts[a]
		n.first = append(n.first, f)
		if i%namedRun == 0 {
			n.least = append(n.least, f)
		}
		n.least[i/namedRun] = min(n.least[i/namedRun], f)
	}
	return n
}

func (n *named) index(a uint64) int {
	i, _ := slices.BinarySearch(n.addrs, a)
	return i
}

// has reports whether an entry not undone names a.
func (n *named) has(a uint64) bool {
	i := n.index(a)
	return i < len(n.addrs) && n.addrs[i] == a && n.first[i] < n.now
}

// firstIn returns the lowest address in [lo, hi) that an entry not
// undone names. It costs O(log a) for the a addresses named, and a step
// for each run of namedRun of them in the range, and for each address of
// the runs at its ends.
func (n *named) firstIn(lo, hi uint64) (uint64, bool) {
	for i := n.index(lo); i < len(n.addrs) && n.addrs[i] < hi; {
		if i%namedRun == 0 && n.least[i/namedRun] >= n.now {
			i += namedRun // all named after now
			continue
		}
		if n.first[i] < n.now {
			return n.addrs[i], true
		}
		i++
	}
	return 0, false
}
