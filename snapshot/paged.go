package snapshot

// A paged is a list that the decoder appends to, millions of values long
// in a big snapshot: it is held in pages of pageSize values, so that it
// grows without copying what it holds (append copies a large slice about
// four times over as it grows it). The first page grows as a slice, so
// that a short list takes no more than it needs.
type paged[T any] struct {
	pages [][]T // all full but the last
	n     int
}

const (
	pageShift = 15
	pageSize  = 1 << pageShift
)

func (p *paged[T]) len() int { return p.n }

// at returns value i, i < p.len().
func (p *paged[T]) at(i uint64) *T { return &p.pages[i>>pageShift][i&(pageSize-1)] }

// append adds v at the end.
func (p *paged[T]) append(v T) {
	if k := len(p.pages); k == 0 || len(p.pages[k-1]) == pageSize {
		var pg []T
		if k > 0 {
			pg = make([]T, 0, pageSize)
		}
		p.pages = append(p.pages, pg)
	}
	k := len(p.pages) - 1
	p.pages[k] = append(p.pages[k], v)
	p.n++
}
