package segment

import (
	"fmt"
	"math/bits"
)

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

// classes are the first block of each size class, 0 if the class is
// empty, and bitmaps of the non-empty classes, which find the next
// non-empty class in two bit scans: what [Sorted] (a treap per class) and
// [Lists] (a list per class) share. The zero classes are empty.
type classes struct {
	flMap uint64                  // bit fl: some slMap[fl] bit is set
	slMap [FLCount]uint32         // bit sl of slMap[fl]: class (fl, sl) is not empty
	first [FLCount][SLCount]int32 // the treap's root or the list's head of each class
}

// mark records that class (fl, sl) is not empty.
func (c *classes) mark(fl, sl int) {
	c.flMap |= 1 << fl
	c.slMap[fl] |= 1 << sl
}

// emptied clears the bits of class (fl, sl) if it is empty.
func (c *classes) emptied(fl, sl int) {
	if c.first[fl][sl] == 0 {
		c.clear(fl, sl)
	}
}

// clear clears the bits of class (fl, sl), which is empty.
func (c *classes) clear(fl, sl int) {
	c.slMap[fl] &^= 1 << sl
	if c.slMap[fl] == 0 {
		c.flMap &^= 1 << fl
	}
}

// from returns the first non-empty class at or after (fl, sl), sl at most
// SLCount (which stands for the class after (fl, SLCount-1)), or false if
// there is none.
func (c *classes) from(fl, sl int) (int, int, bool) {
	m := c.slMap[fl] & (^uint32(0) << sl) // a shift by 32 gives 0
	if m == 0 {
		fm := c.flMap & (^uint64(0) << fl << 1)
		if fm == 0 {
			return 0, 0, false
		}
		fl = bits.TrailingZeros64(fm)
		m = c.slMap[fl]
	}
	return fl, bits.TrailingZeros32(m), true
}

// highest returns the highest non-empty class, or false if every class is
// empty.
func (c *classes) highest() (fl, sl int, ok bool) {
	if c.flMap == 0 {
		return 0, 0, false
	}
	fl = FLCount - 1 - bits.LeadingZeros64(c.flMap)
	return fl, SLCount - 1 - bits.LeadingZeros32(c.slMap[fl]), true
}

// check verifies that the bitmaps agree with the classes' first blocks.
func (c *classes) check() error {
	for fl := range FLCount {
		if (c.flMap>>fl&1 != 0) != (c.slMap[fl] != 0) {
			return fmt.Errorf("flMap bit %d is %d but slMap[%d] = %#x", fl, c.flMap>>fl&1, fl, c.slMap[fl])
		}
		for sl := range SLCount {
			if (c.slMap[fl]>>sl&1 != 0) != (c.first[fl][sl] != 0) {
				return fmt.Errorf("slMap[%d] bit %d is %d but the class's first block is %d", fl, sl, c.slMap[fl]>>sl&1, c.first[fl][sl])
			}
		}
	}
	return nil
}
