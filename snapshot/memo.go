package snapshot

// A memoTable is the decoder's memo for the entries stored in order: 8
// bytes each, the kind in the low bits and the value above, so that the
// two memo entries that PyTorch's pickler makes for each trace entry (its
// dict and its list of frames) take 16 bytes, not 32; a value too wide for
// that is kept in a map. Beside it, a byte per entry tells the frames
// (isFrame, isEC) for absorb. Both lists are paged with the read's spill.
type memoTable struct {
	packed paged[uint64]
	wide   map[uint64]val // the entries whose value needs more than 64-kindBits bits
	frame  paged[byte]    // for each entry: isFrame, | isEC on the empty-cache path
	gen    uint32         // counts the frames stored over
}

const (
	kindBits = 5
	kindMask = 1<<kindBits - 1
	// kWide marks a packed entry whose value is in memoTable.wide.
	kWide kind = kindMask
)

// The bits of memoTable.frame.
const (
	isFrame = 1 // the memo entry is a kFrame
	isEC    = 2 // on the empty-cache path
)

func (m *memoTable) len() int { return m.packed.len() }

// pack returns v as a packed entry, kWide if its value does not fit.
func pack(v val) uint64 {
	if v.X>>(64-kindBits) != 0 {
		return uint64(kWide)
	}
	return v.X<<kindBits | uint64(v.K)
}

// at returns entry i, i < m.len(). Where the page of its frame byte is
// spilled, it loads that too, for absorb.
func (m *memoTable) at(i uint64) val {
	if m.frame.pages[i>>pageShift] == nil {
		m.frame.at(i)
	}
	p := *m.packed.at(i)
	if k := kind(p & kindMask); k != kWide {
		return val{K: k, X: p >> kindBits}
	}
	return m.wide[i]
}

// set sets entry i, i < m.len().
func (m *memoTable) set(i uint64, v val) {
	p := pack(v)
	if kind(p&kindMask) == kWide {
		m.setWide(i, v)
	}
	q, f := m.packed.at(i), m.frame.at(i)
	if *f&isFrame != 0 && *q != p {
		m.gen++ // a frame stored over: the frameRuns that refer to it are stale
	}
	*q, *f = p, frameKind(v)
	m.packed.changed(i)
	m.frame.changed(i)
}

// append adds v as entry m.len().
func (m *memoTable) append(v val) {
	p := pack(v)
	if kind(p&kindMask) == kWide {
		m.setWide(uint64(m.len()), v)
	}
	m.packed.append(p)
	m.frame.append(frameKind(v))
}

func (m *memoTable) setWide(i uint64, v val) {
	if m.wide == nil {
		m.wide = map[uint64]val{}
	}
	m.wide[i] = v
}

// frameKind returns the bits of memoTable.frame for v.
func frameKind(v val) byte {
	switch {
	case v.K != kFrame:
		return 0
	case v.X&frameEC != 0:
		return isFrame | isEC
	}
	return isFrame
}
