package segment

import "math/bits"

// Free blocks are grouped into size classes, the lists of TLSF (Masmano et
// al., 2004): a size s >= 32 lies in first-level class fl = floor(log2 s),
// which covers [2^fl, 2^(fl+1)), cut into 32 second-level classes of
// 2^(fl-5) bytes each, sl = (s >> (fl-5)) - 32. Sizes below 32 have a class
// each: fl = 0, sl = s. (A pool's blocks are never that small, but the
// mapping is total.) Classes are ordered as their sizes are, so a bitmap of
// the non-empty first-level classes and, per first level, one of the
// non-empty second-level classes find the next non-empty class in two bit
// scans.
const (
	SLBits  = 5
	SLCount = 1 << SLBits // second-level classes per first level
	FLCount = 64          // first-level classes: one per bit of a size
)

// Class returns the size class of size >= 1 bytes: the class whose range
// holds size.
func Class(size int64) (fl, sl int) {
	u := uint64(size)
	if u < SLCount {
		return 0, int(u)
	}
	fl = bits.Len64(u) - 1
	sl = int(u>>(fl-SLBits)) - SLCount
	return fl, sl
}

// SearchClass returns the first class whose every block is at least size
// >= 1 bytes: the class of size rounded up to the start of the next class,
// unless size starts one. This is TLSF's rule for a search, so that any
// block of the class found fits without a search of the class.
func SearchClass(size int64) (fl, sl int) {
	u := uint64(size)
	if u >= SLCount {
		u += 1<<(bits.Len64(u)-1-SLBits) - 1 // cannot overflow: u < 2^63
	}
	return Class(int64(u))
}

// ClassStart returns the smallest size >= size that starts a class: the
// smallest free block in the class SearchClass(size) returns. It returns
// size if that would not fit in an int64.
func ClassStart(size int64) int64 {
	fl, sl := SearchClass(size)
	if fl == 0 {
		return int64(sl)
	}
	s := uint64(SLCount+sl) << (fl - SLBits)
	if s > 1<<63-1 {
		return size
	}
	return int64(s)
}
