// Package pages holds long lists in pages of a fixed size, and writes the
// pages past a bound on memory to a temporary file, reading them back a
// page at a time when they are needed: a [List] grows without copying
// what it holds, and its memory stays bounded whatever its length. The
// user of a list gives the encoding of its values in the file (a
// [Codec]); the package knows nothing of what they mean.
package pages

// A List is a list appended to, millions of values long: it is held in
// pages of Size values, so that it grows without copying what it holds
// (append copies a large slice about four times over as it grows it).
// The first page grows as a slice, so that a short list takes no more
// than it needs.
//
// Past the bound of its Spill, each page that fills is written out with
// the list's Codec and dropped, and At loads it back when it is needed:
// At costs O(1), and a read of Size values from the file where the page
// is not loaded. The zero List holds every page in memory.
type List[T any] struct {
	// Pages holds the pages, all full but the last, nil where spilled
	// and not loaded: a fast path may read a value in place where its
	// page is there, and call At where it is not.
	Pages  [][]T
	n      int
	sp     *Spill       // where the pages past the bound go; nil: none do
	codec  *Codec[T]    // how sp holds a page
	from   int          // the first page that went to sp, when offs is not empty
	offs   []int64      // the offset in sp of each page from from on
	loaded []loadedPage // the spilled pages loaded, oldest first
	spare  []T          // a page written out or dropped, for the next
}

// A loadedPage is a spilled page of a List loaded in memory.
type loadedPage struct {
	k     int  // its index in List.Pages
	dirty bool // changed since it was loaded
}

// The values of a page: value i is on page i>>Shift, at i&(Size-1).
const (
	Shift = 15
	Size  = 1 << Shift
)

// New returns an empty list whose pages past sp's bound go to sp,
// encoded by c; a nil sp holds them all.
func New[T any](sp *Spill, c *Codec[T]) List[T] { return List[T]{sp: sp, codec: c} }

// Len returns the number of values.
func (p *List[T]) Len() int { return p.n }

// At returns value i, i < p.Len(). The pointer is valid until the next
// call of a method of p.
func (p *List[T]) At(i uint64) *T {
	pg := p.Pages[i>>Shift]
	if pg == nil {
		pg = p.load(int(i >> Shift))
	}
	return &pg[i&(Size-1)]
}

// Changed notes that value i was changed through At, so that its page,
// when it is a spilled one, is written out again before it is dropped.
func (p *List[T]) Changed(i uint64) {
	k := int(i >> Shift)
	if len(p.offs) == 0 || k < p.from {
		return
	}
	for j := range p.loaded {
		if p.loaded[j].k == k {
			p.loaded[j].dirty = true
		}
	}
}

// Append adds v at the end.
func (p *List[T]) Append(v T) {
	if k := len(p.Pages) - 1; k >= 0 {
		pg := &p.Pages[k]
		if n := len(*pg); n < cap(*pg) && n < Size {
			*pg = (*pg)[:n+1] // a slice's own: its length alone is stored
			(*pg)[n] = v
			p.n++
			return
		}
	}
	p.grow(v)
}

// grow is Append where the last page is full: it starts a page, or makes
// room in the first as a slice does.
func (p *List[T]) grow(v T) {
	if k := len(p.Pages); k == 0 || len(p.Pages[k-1]) == Size {
		var pg []T
		if k > 0 {
			p.filled(k - 1)
			pg = p.newPage()[:0]
		}
		p.Pages = append(p.Pages, pg)
	}
	k := len(p.Pages) - 1
	p.Pages[k] = append(p.Pages[k], v)
	p.n++
}

// filled keeps page k, which has just filled, or spills it: from the
// first page spilled on, every page of p is.
func (p *List[T]) filled(k int) {
	if len(p.offs) == 0 && (p.sp == nil || p.sp.keep(int64(p.codec.Bytes*len(p.Pages[k])))) {
		return
	}
	if len(p.offs) == 0 {
		p.from = k
	}
	at, ok := p.sp.write(p.codec.encode(&p.sp.buf, p.Pages[k]))
	p.offs = append(p.offs, at)
	if ok { // else the spill has failed, and the page stays for what is left
		p.spare, p.Pages[k] = p.Pages[k], nil
	}
}

// newPage returns a page of Size values: the spare one, if any.
func (p *List[T]) newPage() []T {
	if pg := p.spare; pg != nil {
		p.spare = nil
		return pg[:Size]
	}
	return make([]T, Size)
}

// load reads spilled page k back, and drops the page loaded longest ago
// when more than the spill's loaded are. Where the file fails, the spill
// fails (see Spill), and a changed page not written again stays.
func (p *List[T]) load(k int) []T {
	pg := p.newPage()
	p.sp.buf = Room(p.sp.buf, p.codec.Bytes*len(pg))
	p.sp.read(p.sp.buf, p.offs[k-p.from])
	p.codec.Decode(pg, p.sp.buf)
	p.Pages[k] = pg
	p.loaded = append(p.loaded, loadedPage{k: k})
	if len(p.loaded) > p.sp.loaded {
		l := p.loaded[0]
		p.loaded = append(p.loaded[:0], p.loaded[1:]...)
		if !l.dirty || p.sp.rewrite(p.codec.encode(&p.sp.buf, p.Pages[l.k]), p.offs[l.k-p.from]) {
			p.spare, p.Pages[l.k] = p.Pages[l.k], nil
		}
	}
	return pg
}

// A Held is a list that nothing appends to any more, as Hold leaves it:
// the pages held in memory, then those in the file.
type Held[T any] struct {
	Pages [][]T   // the pages before the first spilled
	N     int     // the values, in all
	Offs  []int64 // the offset in the spill's file of each page after Pages
	Spill *Spill  // where they are; nil when Offs is empty
}

// Hold ends p's appends and returns it as a Held: where p spills, its
// last page is written out too (where that fails, the spill fails).
func (p *List[T]) Hold() Held[T] {
	if k := len(p.Pages) - 1; len(p.offs) > 0 {
		at, ok := p.sp.write(p.codec.encode(&p.sp.buf, p.Pages[k]))
		p.offs = append(p.offs, at)
		if ok {
			p.Pages[k] = nil
		}
	}
	if len(p.offs) == 0 {
		return Held[T]{Pages: p.Pages, N: p.n}
	}
	return Held[T]{Pages: p.Pages[:p.from], N: p.n, Offs: p.offs, Spill: p.sp}
}
