package pickle

import "github.com/gpualloc/gpualloc/snapshot/internal/pages"

// A Memo is a machine's memo. The entries stored in order, as picklers
// write them, take 8 bytes each: the kind in the low bits and the value
// above, so that each of the millions of small containers that a big
// pickle memoizes costs 8 bytes, not the 16 of a Val; a value too wide
// for that is kept in a map. Beside each such entry is a byte, its tag,
// which the Builder gives it when it is stored (Builder.Memoized) and the
// layer above's fast paths read in place (Tags): the hundreds of entries
// that a file refers to millions of times are told apart within the
// processor's first cache. Both lists are paged, and go to the Spill
// given to Init past its bound: 9 bytes an entry in its file. Entries
// stored out of order go to a map, so that no index makes the memo larger
// than the PUTs in the file.
type Memo struct {
	packed pages.List[uint64]
	wide   map[uint64]Val // the entries whose value needs more than 64-kindBits bits
	tags   pages.List[uint8]
	far    map[uint64]Val // the entries stored out of order
	gen    uint32         // counts the tagged entries stored over
}

const (
	kindBits = 5
	kindMask = 1<<kindBits - 1
	// kWide marks a packed entry whose value is in Memo.wide: the kinds
	// of the layer above are below it.
	kWide Kind = kindMask
)

// Init makes m an empty memo whose pages past sp's bound go to sp.
func (m *Memo) Init(sp *pages.Spill) {
	*m = Memo{packed: pages.New(sp, pages.Uint64s), tags: pages.New(sp, pages.Bytes)}
}

// Len returns the number of entries stored in order: those that At and
// Set take.
func (m *Memo) Len() int { return m.packed.Len() }

// Gen counts the entries with a tag other than 0 that were stored over by
// another value: what the layer above kept of such entries is stale once
// it changes.
func (m *Memo) Gen() uint32 { return m.gen }

// Tags returns the pages of the entries' tags, nil where a page is in the
// spill's file (At loads it): entry i's tag is Tags()[i>>pages.Shift]
// [i&(pages.Size-1)], valid until the next call of a method of m.
func (m *Memo) Tags() [][]uint8 { return m.tags.Pages }

// pack returns v as a packed entry, kWide if its value does not fit.
func pack(v Val) uint64 {
	if v.X>>(64-kindBits) != 0 {
		return uint64(kWide)
	}
	return v.X<<kindBits | uint64(v.K)
}

// At returns entry i, i < m.Len(). Where the page of its tag is in the
// spill's file, it loads that too, for the fast paths that read Tags.
func (m *Memo) At(i uint64) Val {
	if m.tags.Pages[i>>pages.Shift] == nil {
		m.tags.At(i)
	}
	p := *m.packed.At(i)
	if k := Kind(p & kindMask); k != kWide {
		return Val{K: k, X: p >> kindBits}
	}
	return m.wide[i]
}

// Entry returns entry i, stored in order or not, false when none was
// stored.
func (m *Memo) Entry(i uint64) (Val, bool) {
	if i < uint64(m.Len()) {
		return m.At(i), true
	}
	v, ok := m.far[i]
	return v, ok
}

// Set sets entry i, i < m.Len(), to v with tag t.
func (m *Memo) Set(i uint64, v Val, t uint8) {
	p := pack(v)
	if Kind(p&kindMask) == kWide {
		m.setWide(i, v)
	}
	q, f := m.packed.At(i), m.tags.At(i)
	if *f != 0 && *q != p {
		m.gen++
	}
	*q, *f = p, t
	m.packed.Changed(i)
	m.tags.Changed(i)
}

// append adds v, with tag t, as entry m.Len().
func (m *Memo) append(v Val, t uint8) {
	p := pack(v)
	if Kind(p&kindMask) == kWide {
		m.setWide(uint64(m.Len()), v)
	}
	m.packed.Append(p)
	m.tags.Append(t)
}

func (m *Memo) setWide(i uint64, v Val) {
	if m.wide == nil {
		m.wide = map[uint64]Val{}
	}
	m.wide[i] = v
}

// put runs PUT i (BINPUT, LONG_BINPUT, MEMOIZE): the top of the stack
// goes to entry i, in order where i is an entry stored or the next one,
// else apart. The Builder learns of it first (Memoized), and gives the
// entry its tag.
func (m *Machine) put(b Builder, i uint64) {
	n := len(m.Stack)
	if n == 0 || m.Stack[n-1].K == KMark {
		m.Fail("memo PUT of nothing")
		return
	}
	v := m.Stack[n-1]
	old, _ := m.Memo.Entry(i) // a KMark where none
	memo := &m.Memo
	switch {
	case i < uint64(memo.Len()):
		memo.Set(i, v, b.Memoized(i, v, old, false))
	case i == uint64(memo.Len()) && memo.far[i].K == KMark:
		memo.append(v, b.Memoized(i, v, old, false))
	default:
		b.Memoized(i, v, old, true)
		if memo.far == nil {
			memo.far = map[uint64]Val{}
		}
		memo.far[i] = v
	}
}

// memoize runs MEMOIZE: a PUT at the number of memo entries.
func (m *Machine) memoize(b Builder) { m.put(b, uint64(m.Memo.Len()+len(m.Memo.far))) }

// get runs GET i (BINGET, LONG_BINGET): entry i is pushed, and the
// Builder told that it is referenced once more (Share).
func (m *Machine) get(b Builder, i uint64) {
	v, ok := m.Memo.Entry(i)
	if !ok {
		m.Fail("memo GET %d of an entry never stored", i)
		return
	}
	b.Share(v)
	m.Push(v)
}
