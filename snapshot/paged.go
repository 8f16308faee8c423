package snapshot

// A paged is a list that the decoder appends to, millions of values long
// in a big snapshot: it is held in pages of pageSize values, so that it
// grows without copying what it holds (append copies a large slice about
// four times over as it grows it). The first page grows as a slice, so
// that a short list takes no more than it needs.
//
// Past the bound of its spill, each page that fills is written out and
// dropped (see spill), and at loads it back when it is needed: at costs
// O(1), and a read of pageSize values from the file where the page is
// not loaded. The values are of a type that the file can hold (flat).
type paged[T flat] struct {
	pages  [][]T // all full but the last; nil where spilled and not loaded
	n      int
	sp     *spill       // where the pages past the bound go; nil: none do
	from   int          // the first page that went to sp, when offs is not empty
	offs   []int64      // the offset in sp of each page from from on
	loaded []loadedPage // the spilled pages loaded, oldest first
	spare  []T          // a page written out or dropped, for the next
}

// A loadedPage is a spilled page of a paged loaded in memory.
type loadedPage struct {
	k     int  // its index in paged.pages
	dirty bool // changed since it was loaded
}

const (
	pageShift = 15
	pageSize  = 1 << pageShift
)

func (p *paged[T]) len() int { return p.n }

// at returns value i, i < p.len(). The pointer is valid until the next
// call of a method of p.
func (p *paged[T]) at(i uint64) *T {
	pg := p.pages[i>>pageShift]
	if pg == nil {
		pg = p.load(int(i >> pageShift))
	}
	return &pg[i&(pageSize-1)]
}

// changed notes that value i was changed through at, so that its page,
// when it is a spilled one, is written out again before it is dropped.
func (p *paged[T]) changed(i uint64) {
	k := int(i >> pageShift)
	if len(p.offs) == 0 || k < p.from {
		return
	}
	for j := range p.loaded {
		if p.loaded[j].k == k {
			p.loaded[j].dirty = true
		}
	}
}

// append adds v at the end.
func (p *paged[T]) append(v T) {
	if k := len(p.pages) - 1; k >= 0 {
		if pg := p.pages[k]; len(pg) < cap(pg) && len(pg) < pageSize {
			n := len(pg)
			p.pages[k] = pg[:n+1]
			p.pages[k][n] = v
			p.n++
			return
		}
	}
	p.grow(v)
}

// grow is append where the last page is full: it starts a page, or makes
// room in the first as a slice does.
func (p *paged[T]) grow(v T) {
	if k := len(p.pages); k == 0 || len(p.pages[k-1]) == pageSize {
		var pg []T
		if k > 0 {
			p.filled(k - 1)
			pg = p.newPage()[:0]
		}
		p.pages = append(p.pages, pg)
	}
	k := len(p.pages) - 1
	p.pages[k] = append(p.pages[k], v)
	p.n++
}

// filled keeps page k, which has just filled, or spills it: from the
// first page spilled on, every page of p is.
func (p *paged[T]) filled(k int) {
	if len(p.offs) == 0 && p.sp.keep(int64(pageBytes[T](len(p.pages[k])))) {
		return
	}
	if len(p.offs) == 0 {
		p.from = k
	}
	p.sp.buf = encodePage(p.sp.buf, p.pages[k])
	at, ok := p.sp.write(p.sp.buf)
	p.offs = append(p.offs, at)
	if ok { // else the read fails, and the page stays for what is left of it
		p.spare, p.pages[k] = p.pages[k], nil
	}
}

// newPage returns a page of pageSize values: the spare one, if any.
func (p *paged[T]) newPage() []T {
	if pg := p.spare; pg != nil {
		p.spare = nil
		return pg[:pageSize]
	}
	return make([]T, pageSize)
}

// load reads spilled page k back, and drops the page loaded longest ago
// when more than the spill's loaded are. Where the file fails, the read
// fails (see spill), and a changed page not written again stays.
func (p *paged[T]) load(k int) []T {
	pg := p.newPage()
	p.sp.buf = room(p.sp.buf, pageBytes[T](len(pg)))
	p.sp.read(p.sp.buf, p.offs[k-p.from])
	decodePage(pg, p.sp.buf)
	p.pages[k] = pg
	p.loaded = append(p.loaded, loadedPage{k: k})
	if len(p.loaded) > p.sp.loaded {
		l := p.loaded[0]
		p.loaded = append(p.loaded[:0], p.loaded[1:]...)
		if !l.dirty || p.sp.rewrite(encodePage(p.sp.buf, p.pages[l.k]), p.offs[l.k-p.from]) {
			p.spare, p.pages[l.k] = p.pages[l.k], nil
		}
	}
	return pg
}
