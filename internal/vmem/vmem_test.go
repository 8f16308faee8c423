package vmem

import (
	"errors"
	"testing"

	"github.com/gpualloc/gpualloc"
)

const g = 2 << 20

func newSpace() *Space {
	return &Space{Base: 1 << 40, Size: 1 << 40, Gran: g, Prefix: "test"}
}

// books is what s holds, to compare.
type books struct {
	ranges, handles, mappings int
	reserved, physical        int64
}

func inUse(s *Space) books {
	var b books
	b.ranges, b.reserved, b.handles, b.physical, b.mappings = s.InUse()
	return b
}

// TestAdd checks the ranges a driver reserved: aligned, in the window,
// apart from the others (adjacent is fine).
func TestAdd(t *testing.T) {
	base := uint64(1 << 40)
	for _, c := range []struct {
		name string
		addr uint64
		size int64
		want error
	}{
		{"after", base + 8*g, 2 * g, nil},
		{"adjacent before", base + 2*g, 2 * g, nil},
		{"adjacent after", base + 6*g, 2 * g, nil},
		{"at the window's start", base, 2 * g, nil},
		{"at the window's end", base + 1<<40 - 2*g, 2 * g, nil},
		{"overlaps the start", base + 3*g, 2 * g, gpualloc.ErrInvalidFree},
		{"overlaps the end", base + 5*g, 2 * g, gpualloc.ErrInvalidFree},
		{"inside", base + 4*g, g, gpualloc.ErrInvalidFree},
		{"around", base + 3*g, 4 * g, gpualloc.ErrInvalidFree},
		{"not aligned", base + 8*g + 512, 2 * g, gpualloc.ErrInvalidFree},
		{"before the window", base - 2*g, 2 * g, gpualloc.ErrInvalidFree},
		{"past the window", base + 1<<40 - g, 2 * g, gpualloc.ErrInvalidFree},
		{"far past the window", 1 << 63, 2 * g, gpualloc.ErrInvalidFree},
		{"not a multiple of the granularity", base + 8*g, g + 1, gpualloc.ErrInvalidSize},
		{"empty", base + 8*g, 0, gpualloc.ErrInvalidSize},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newSpace()
			if err := s.Add(base+4*g, 2*g); err != nil {
				t.Fatal(err)
			}
			before := inUse(s)
			err := s.Add(c.addr, c.size)
			if c.want == nil {
				if err != nil {
					t.Fatalf("Add(%#x, %d) = %v", c.addr, c.size, err)
				}
				if b := inUse(s); b.ranges != 2 || b.reserved != 2*g+c.size {
					t.Errorf("after Add: %+v", b)
				}
				if err := s.Unreserve(c.addr, c.size); err != nil {
					t.Errorf("Unreserve of the range added: %v", err)
				}
				return
			}
			if !errors.Is(err, c.want) {
				t.Fatalf("Add(%#x, %d) = %v, want an error wrapping %v", c.addr, c.size, err, c.want)
			}
			if inUse(s) != before {
				t.Errorf("a refused Add changed the books: %+v, was %+v", inUse(s), before)
			}
		})
	}
}

// TestHandleSize checks the size of live physical memory, and of none.
func TestHandleSize(t *testing.T) {
	s := newSpace()
	h := s.Create(4 * g)
	if got := s.HandleSize(h); got != 4*g {
		t.Errorf("HandleSize = %d, want %d", got, 4*g)
	}
	if got := s.HandleSize(h + 1); got != 0 {
		t.Errorf("HandleSize of no memory = %d, want 0", got)
	}
}
