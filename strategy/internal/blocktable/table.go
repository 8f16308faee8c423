// Package blocktable keeps a strategy's records of its live blocks, found by
// the [gpualloc.Block] Handle it hands out: O(1) per operation, with no
// hashing and no allocation once the table has grown to the peak number of
// live blocks. Its [Slot], the reuse of a slice's slots through a list of
// spare indexes, serves the strategies' other records too.
package blocktable

import (
	"fmt"

	"github.com/gpualloc/gpualloc"
)

// A Table holds a record of type T per live block. The zero Table is empty
// and ready to use. Handles start at 1, so a zero Handle is never live.
type Table[T any] struct {
	recs   []rec[T]
	unused []uint32 // indexes of free records, reused last-in first-out
}

type rec[T any] struct {
	addr uint64
	live bool
	v    T
}

// Slot returns the index of a slot of *items for a new record: the last
// index of *spare, which it takes off, or else that of a zero item it
// appends. A reused slot holds what its last user left there; the caller
// overwrites or has cleared it. It takes O(1) time, amortized over the
// appends, and allocates only when *items grows past its capacity. Table's
// records, segment's nodes, cachepool's segments and buddy's arenas take
// their slots here.
func Slot[T any, I ~int32 | ~uint32](items *[]T, spare *[]I) I {
	if s := *spare; len(s) > 0 {
		*spare = s[:len(s)-1]
		return s[len(s)-1]
	}
	var zero T
	*items = append(*items, zero)
	return I(len(*items) - 1)
}

// Put records a live block at addr and returns its handle.
func (t *Table[T]) Put(addr uint64, v T) uint64 {
	i := Slot(&t.recs, &t.unused)
	t.recs[i] = rec[T]{addr: addr, live: true, v: v}
	return uint64(i) + 1
}

// Get returns the record of the live block with handle h at addr, or nil
// if there is none: a handle never handed out, already deleted, or of
// another address.
func (t *Table[T]) Get(h, addr uint64) *T {
	i := h - 1 // a zero handle wraps to an index past the end
	if i >= uint64(len(t.recs)) || !t.recs[i].live || t.recs[i].addr != addr {
		return nil
	}
	return &t.recs[i].v
}

// Delete forgets the live block with handle h, which Get must have found.
func (t *Table[T]) Delete(h uint64) {
	i := uint32(h - 1)
	var zero rec[T]
	t.recs[i] = zero
	t.unused = append(t.unused, i)
}

// Len returns the number of live blocks.
func (t *Table[T]) Len() int { return len(t.recs) - len(t.unused) }

// NotLive returns the error of a Free, by the strategy name, of b, which is
// not a live block: its Handle was never handed out, its block was freed,
// or it is of another address.
func NotLive(name string, b gpualloc.Block) error {
	return fmt.Errorf("%s: free of %#x (%d bytes): no live block there: %w", name, b.Addr, b.Size, gpualloc.ErrInvalidFree)
}

// Mismatch returns the error of a Free, by the strategy name, of b, whose
// Size or Requested differ from size and requested, those of the live
// block there.
func Mismatch(name string, b gpualloc.Block, size, requested int64) error {
	return fmt.Errorf("%s: free of %#x with Size %d, Requested %d: the live block there has Size %d, Requested %d: %w",
		name, b.Addr, b.Size, b.Requested, size, requested, gpualloc.ErrInvalidFree)
}
