package planned

// The position of a request in the step is found from the events just
// before it: the allocations and frees, each a token (+size for an
// allocation, -size for a free). A run of window tokens that occurs once in
// the step's cyclic sequence of events, and ends with an allocation, names
// that allocation's position. Frees count because sizes alone repeat where
// lifetimes do not: the weights allocated at start-up, never freed, ask for
// the sizes the optimizer's temporaries ask for, each freed at once. Each
// event costs one hash update, each allocation one map look-up; a hit is
// verified token by token (O(window)). Runs that occur more than once (the
// identical layers of a transformer repeat theirs) locate nothing: the
// position is found only near what is unique in the step (its start, its
// end, the loss), and until then requests go to the fallback.

// hashMul is the multiplier of the rolling hash (the 64-bit FNV prime).
const hashMul = 1099511628211

// A syncTable maps the hash of each run of window tokens that occurs once in
// the events the plan expects, and ends with an allocation, to the index of
// that token; runs that occur more than once map to -1. The events are a
// prefix, what the profile did before its steps (start-up, a first step
// that also allocates the optimizer's state), followed by the step, which
// repeats: the index after the step's last token is the step's first.
type syncTable struct {
	window int
	pow    uint64  // hashMul^window
	tokens []int64 // the prefix's, then the step's
	pos    []int32 // for each token, the position of its allocation in the step, or -1
	pre    int     // tokens of the prefix
	at     map[uint64]int32
}

func newSyncTable(tokens []int64, pos []int32, pre, window int) syncTable {
	t := syncTable{window: window, pow: 1, tokens: tokens, pos: pos, pre: pre, at: make(map[uint64]int32, len(tokens))}
	for range window {
		t.pow *= hashMul
	}
	for i := range tokens {
		if i < pre && i < window-1 {
			continue
		}
		var h uint64
		for j := window - 1; j >= 0; j-- {
			h = h*hashMul + uint64(tokens[t.back(i, j)])
		}
		if _, dup := t.at[h]; dup {
			t.at[h] = -1
		} else if tokens[i] > 0 {
			t.at[h] = int32(i)
		}
	}
	return t
}

// next returns the index after i.
func (t *syncTable) next(i int) int {
	if i+1 < t.pre {
		return i + 1
	}
	return t.pre + (i+1-t.pre)%(len(t.tokens)-t.pre)
}

// back returns the index j tokens before i: in the prefix, j before it
// (i >= j); in the step, cyclically.
func (t *syncTable) back(i, j int) int {
	if i < t.pre {
		return i - j
	}
	return t.pre + mod(i-t.pre-j, len(t.tokens)-t.pre)
}

func mod(i, p int) int { return ((i % p) + p) % p }

// A ring holds the last window tokens and their hash.
type ring struct {
	tokens []int64
	next   int
	n      int
	hash   uint64
}

func newRing(window int) ring { return ring{tokens: make([]int64, window)} }

// push adds a token, dropping the oldest beyond the window.
func (r *ring) push(tok int64, pow uint64) {
	r.hash = r.hash*hashMul + uint64(tok)
	if r.n == len(r.tokens) {
		r.hash -= pow * uint64(r.tokens[r.next])
	} else {
		r.n++
	}
	r.tokens[r.next] = tok
	r.next = (r.next + 1) % len(r.tokens)
}

// locate returns the token index in the step of the allocation pushed
// last, if the last window tokens occur once in the step.
func (t *syncTable) locate(r *ring) (int, bool) {
	if r.n < t.window {
		return 0, false
	}
	i, ok := t.at[r.hash]
	if !ok || i < 0 {
		return 0, false
	}
	for j := range t.window {
		if r.tokens[mod(r.next-1-j, len(r.tokens))] != t.tokens[t.back(int(i), j)] {
			return 0, false
		}
	}
	return int(i), true
}
