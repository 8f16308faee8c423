// Package segmenttest holds the test helpers that the tests of the
// strategies built on package segment share: a notation for heap layouts,
// for before/after tables, and a driver of random operations, for seeded
// tests and fuzz targets, that checks every invariant after every operation.
package segmenttest

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/backend/virtual"
	"github.com/gpualloc/gpualloc/strategy/internal/segment"
)

// ParseLayout parses a layout written as segments separated by "|", each a
// list of blocks separated by spaces: "F" for a free block or "U" for a
// live one, then its size in bytes, with an optional suffix K (KiB) or M
// (MiB). For example "U512 F1536 | F2K U1K" is two segments.
func ParseLayout(s string) ([][]segment.LayoutBlock, error) {
	var segs [][]segment.LayoutBlock
	for _, part := range strings.Split(s, "|") {
		var blocks []segment.LayoutBlock
		for _, f := range strings.Fields(part) {
			b, err := parseBlock(f)
			if err != nil {
				return nil, fmt.Errorf("layout %q: %v", s, err)
			}
			blocks = append(blocks, b)
		}
		segs = append(segs, blocks)
	}
	return segs, nil
}

func parseBlock(f string) (segment.LayoutBlock, error) {
	if len(f) < 2 || f[0] != 'F' && f[0] != 'U' {
		return segment.LayoutBlock{}, fmt.Errorf("block %q: want F or U and a size", f)
	}
	num, unit := f[1:], int64(1)
	switch num[len(num)-1] {
	case 'K':
		num, unit = num[:len(num)-1], 1<<10
	case 'M':
		num, unit = num[:len(num)-1], 1<<20
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil {
		return segment.LayoutBlock{}, fmt.Errorf("block %q: bad size", f)
	}
	return segment.LayoutBlock{Size: n * unit, Free: f[0] == 'F'}, nil
}

// FormatLayout writes segs in the notation of ParseLayout, sizes in the
// largest of M, K or bytes that divides them.
func FormatLayout(segs []segment.LayoutSegment) string {
	var sb strings.Builder
	for i, s := range segs {
		if i > 0 {
			sb.WriteString(" | ")
		}
		for j, b := range s.Blocks {
			if j > 0 {
				sb.WriteByte(' ')
			}
			if b.Free {
				sb.WriteByte('F')
			} else {
				sb.WriteByte('U')
			}
			switch {
			case b.Size%(1<<20) == 0:
				fmt.Fprintf(&sb, "%dM", b.Size>>20)
			case b.Size%(1<<10) == 0:
				fmt.Fprintf(&sb, "%dK", b.Size>>10)
			default:
				fmt.Fprintf(&sb, "%d", b.Size)
			}
		}
	}
	return sb.String()
}

// A Pool is a strategy built on package segment, as the driver uses it.
type Pool interface {
	gpualloc.Allocator
	gpualloc.StatsReporter
	gpualloc.Releaser
	gpualloc.FreeSpaceReporter
}

// Options tune [Drive].
type Options struct {
	// Check verifies the pool's own invariants (its heap, its index, its
	// FreeSpace against a brute-force computation); Drive calls it after
	// every operation.
	Check func() error
	// WantSize, if not nil, is the Size every block must have for a
	// request of size bytes.
	WantSize func(size int64) int64
	// MaxShift bounds request sizes to below 2^(MaxShift+1) bytes; 0 means
	// 23 (16 MiB).
	MaxShift int
}

// Drive runs on p, a pool that takes its memory from dev, the operations
// that ops encodes, three bytes each: allocations of sizes from 1 byte to
// 2^(MaxShift+1), frees of live blocks, ReleaseAll, device mallocs refused
// with room to spare, and invalid frees. After every operation it checks
// that live blocks lie in memory the pool holds and overlap no other, that
// Stats agree with the device and with the live blocks, that a failed
// Alloc wraps ErrOutOfMemory, and opt.Check. At the end it frees
// everything, releases, and checks that the device holds nothing. An
// error names the operation.
func Drive(p Pool, dev *virtual.Device, ops []byte, opt Options) error {
	maxShift := opt.MaxShift
	if maxShift == 0 {
		maxShift = 23
	}
	var live []gpualloc.Block // sorted by address
	var requested, allocated int64
	step := 0
	verify := func(what string) error {
		st, ds := p.Stats(), dev.Stats()
		var bad []string
		eq := func(field string, got, want int64) {
			if got != want {
				bad = append(bad, fmt.Sprintf("%s = %d, want %d", field, got, want))
			}
		}
		eq("Reserved", st.Reserved, ds.Used)
		eq("DeviceMallocs", st.DeviceMallocs, ds.Mallocs)
		eq("DeviceFrees", st.DeviceFrees, ds.Frees)
		eq("Requested", st.Requested, requested)
		eq("Allocated", st.Allocated, allocated)
		eq("live blocks", st.Allocs-st.Frees, int64(len(live)))
		eq("device invalid calls", ds.InvalidCalls, 0)
		if len(bad) > 0 {
			return fmt.Errorf("op %d, %s: stats do not add up: %s", step, what, strings.Join(bad, "; "))
		}
		if opt.Check != nil {
			if err := opt.Check(); err != nil {
				return fmt.Errorf("op %d, %s: %v", step, what, err)
			}
		}
		return nil
	}
	// add records a new live block, checking that it lies in memory the
	// pool holds and overlaps no other live block.
	add := func(b gpualloc.Block, what string) error {
		if !dev.Holds(b.Addr, b.Size) {
			return fmt.Errorf("op %d, %s: block %#x+%d lies outside the device regions", step, what, b.Addr, b.Size)
		}
		i, _ := slices.BinarySearchFunc(live, b.Addr, func(x gpualloc.Block, addr uint64) int { return cmp.Compare(x.Addr, addr) })
		if i > 0 && live[i-1].End() > b.Addr {
			return fmt.Errorf("op %d, %s: block overlaps live block %#x+%d", step, what, live[i-1].Addr, live[i-1].Size)
		}
		if i < len(live) && b.End() > live[i].Addr {
			return fmt.Errorf("op %d, %s: block overlaps live block %#x+%d", step, what, live[i].Addr, live[i].Size)
		}
		live = slices.Insert(live, i, b)
		requested += b.Requested
		allocated += b.Size
		return nil
	}
	free := func(i int) error {
		b := live[i]
		what := fmt.Sprintf("Free(%#x+%d)", b.Addr, b.Size)
		if err := p.Free(b); err != nil {
			return fmt.Errorf("op %d, %s: %v", step, what, err)
		}
		live = slices.Delete(live, i, i+1)
		requested -= b.Requested
		allocated -= b.Size
		return verify(what)
	}
	for len(ops) >= 3 {
		step++
		op, x, y := ops[0], ops[1], ops[2]
		ops = ops[3:]
		switch {
		case op < 150 || len(live) == 0:
			shift := int(x) % (maxShift + 1)
			size := int64(1)<<shift + int64(y)<<shift>>8
			what := fmt.Sprintf("Alloc(%d)", size)
			b, err := p.Alloc(size)
			if err != nil {
				if !errors.Is(err, gpualloc.ErrOutOfMemory) {
					return fmt.Errorf("op %d, %s: error %v does not wrap ErrOutOfMemory", step, what, err)
				}
				if err := verify(what + " failed"); err != nil {
					return err
				}
				continue
			}
			if b.Requested != size || b.Size < size {
				return fmt.Errorf("op %d, %s: got Size %d, Requested %d", step, what, b.Size, b.Requested)
			}
			if opt.WantSize != nil && b.Size != opt.WantSize(size) {
				return fmt.Errorf("op %d, %s: Size %d, want %d", step, what, b.Size, opt.WantSize(size))
			}
			if err := add(b, what); err != nil {
				return err
			}
			if err := verify(what); err != nil {
				return err
			}
		case op < 245:
			if err := free(int(x) % len(live)); err != nil {
				return err
			}
		case op < 250:
			if err := p.ReleaseAll(); err != nil {
				return fmt.Errorf("op %d, ReleaseAll: %v", step, err)
			}
			if err := verify("ReleaseAll"); err != nil {
				return err
			}
		case op < 253:
			dev.FailMallocs(1 + int(x)%2)
		default:
			b := live[int(x)%len(live)]
			b.Size += 512
			if err := p.Free(b); !errors.Is(err, gpualloc.ErrInvalidFree) {
				return fmt.Errorf("op %d, Free of a block with a changed Size: got %v, want ErrInvalidFree", step, err)
			}
			if err := verify("invalid Free"); err != nil {
				return err
			}
		}
	}
	dev.FailMallocs(0)
	for len(live) > 0 {
		step++
		if err := free(int(uint(step*7919) % uint(len(live)))); err != nil {
			return err
		}
	}
	if err := p.ReleaseAll(); err != nil {
		return fmt.Errorf("final ReleaseAll: %v", err)
	}
	if err := verify("final ReleaseAll"); err != nil {
		return err
	}
	if ds := dev.Stats(); ds.Used != 0 || ds.Regions != 0 {
		return fmt.Errorf("everything freed and released, yet the device holds %d bytes in %d regions", ds.Used, ds.Regions)
	}
	if largest, total := p.FreeSpace(); largest != 0 || total != 0 {
		return fmt.Errorf("everything released, yet FreeSpace() = %d, %d", largest, total)
	}
	return nil
}

// RandomOps returns n operations for Drive from seed. The mix of allocs and
// frees drifts, every few hundred operations, between filling the device
// and emptying it.
func RandomOps(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 0x7365_676d_656e_7473))
	ops := make([]byte, 0, 3*n)
	allocBelow := 150
	for i := range n {
		if i%300 == 0 {
			allocBelow = 60 + r.IntN(180) // P(alloc) from 0.25 to 0.95
		}
		op := byte(r.IntN(256))
		if op < 245 { // alloc or free, in the current mix
			if r.IntN(245) < allocBelow {
				op = byte(r.IntN(150))
			} else {
				op = byte(150 + r.IntN(95))
			}
		}
		ops = append(ops, op, byte(r.IntN(256)), byte(r.IntN(256)))
	}
	return ops
}
