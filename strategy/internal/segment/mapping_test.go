package segment

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
)

type class struct{ fl, sl int }

func TestClass(t *testing.T) {
	tests := []struct {
		size         int64
		insert, find class // Class, SearchClass
	}{
		// Below 64 bytes every size has a class of its own.
		{1, class{0, 1}, class{0, 1}},
		{31, class{0, 31}, class{0, 31}},
		{32, class{5, 0}, class{5, 0}},
		{33, class{5, 1}, class{5, 1}},
		{63, class{5, 31}, class{5, 31}},
		// From 64 bytes, 32 classes per power of two.
		{64, class{6, 0}, class{6, 0}},
		{65, class{6, 0}, class{6, 1}},
		{66, class{6, 1}, class{6, 1}},
		{127, class{6, 31}, class{7, 0}},
		{128, class{7, 0}, class{7, 0}},
		{129, class{7, 0}, class{7, 1}},
		// The smallest blocks of a pool.
		{256, class{8, 0}, class{8, 0}},
		{512, class{9, 0}, class{9, 0}},
		{768, class{9, 16}, class{9, 16}},
		{1023, class{9, 31}, class{10, 0}},
		// Band edges: 2^k-1, 2^k, 2^k+1.
		{1<<20 - 1, class{19, 31}, class{20, 0}},
		{1 << 20, class{20, 0}, class{20, 0}},
		{1<<20 + 1, class{20, 0}, class{20, 1}},
		{1<<20 + 1<<15 - 1, class{20, 0}, class{20, 1}},
		{1<<20 + 1<<15, class{20, 1}, class{20, 1}},
		{1<<21 - 1<<15, class{20, 31}, class{20, 31}},
		{1<<21 - 1<<15 + 1, class{20, 31}, class{21, 0}},
		{20 << 20, class{24, 8}, class{24, 8}},
		{20<<20 + 512, class{24, 8}, class{24, 9}},
		{1<<40 - 1, class{39, 31}, class{40, 0}},
		// The largest sizes: a search past 2^63-2^57 finds class 63,
		// which no block is ever in.
		{1 << 62, class{62, 0}, class{62, 0}},
		{1<<63 - 1<<57, class{62, 31}, class{62, 31}},
		{1<<63 - 1<<57 + 1, class{62, 31}, class{63, 0}},
		{1<<63 - 1, class{62, 31}, class{63, 0}},
	}
	for _, tt := range tests {
		fl, sl := Class(tt.size)
		assert.Equal(t, tt.insert, class{fl, sl}, "Class(%d)", tt.size)
		fl, sl = SearchClass(tt.size)
		assert.Equal(t, tt.find, class{fl, sl}, "SearchClass(%d)", tt.size)
	}
}

// TestClassSubdivisions checks the 32 second-level classes of a few
// first-level ones: class sl holds [2^fl + sl*2^(fl-5), 2^fl + (sl+1)*2^(fl-5)).
func TestClassSubdivisions(t *testing.T) {
	for _, fl := range []int{5, 6, 9, 15, 20, 33, 62} {
		step := int64(1) << (fl - SLBits)
		for sl := range SLCount {
			start := int64(1)<<fl + int64(sl)*step
			end := start + step - 1
			for _, size := range []int64{start, end} {
				f, s := Class(size)
				assert.Equal(t, class{fl, sl}, class{f, s}, "Class(%d)", size)
			}
			f, s := SearchClass(start)
			assert.Equal(t, class{fl, sl}, class{f, s}, "SearchClass(%d), a class's start", start)
			assert.Equal(t, start, ClassStart(start), "ClassStart(%d)", start)
			if step > 1 {
				next := class{fl, sl + 1}
				if sl == SLCount-1 {
					next = class{fl + 1, 0}
				}
				f, s := SearchClass(start + 1)
				assert.Equal(t, next, class{f, s}, "SearchClass(%d): rounded up to the next class", start+1)
				if next.fl < FLCount-1 {
					assert.Equal(t, start+step, ClassStart(start+1), "ClassStart(%d)", start+1)
				}
			}
		}
	}
}

// TestClassRandom checks on random sizes that Class(s) is the class whose
// range holds s, and SearchClass(s) the first class whose range starts at
// or above s.
func TestClassRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	start := func(l class) uint64 {
		if l.fl == 0 {
			return uint64(l.sl)
		}
		return uint64(SLCount+l.sl) << (l.fl - SLBits)
	}
	for range 100000 {
		size := int64(r.Uint64N(1<<r.IntN(63)) + 1)
		if size <= 0 {
			continue
		}
		fl, sl := Class(size)
		l := class{fl, sl}
		var next class
		if fl == 0 && sl < SLCount-1 {
			next = class{0, sl + 1}
		} else if fl == 0 {
			next = class{5, 0}
		} else if sl < SLCount-1 {
			next = class{fl, sl + 1}
		} else {
			next = class{fl + 1, 0}
		}
		if !assert.True(t, start(l) <= uint64(size) && uint64(size) < start(next), "size %d in class %v", size, l) {
			return
		}
		fl, sl = SearchClass(size)
		f := class{fl, sl}
		if start(l) == uint64(size) {
			assert.Equal(t, l, f, "SearchClass(%d)", size)
		} else {
			assert.Equal(t, next, f, "SearchClass(%d)", size)
		}
	}
}
