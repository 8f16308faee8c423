package buddy

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/backend/virtual"
	"github.com/gpualloc/gpualloc/strategy/strategytest"
)

// A driver runs operations on a pool and checks every invariant after each
// one against its own account of the live blocks and counters.
type driver struct {
	p     *Pool
	dev   *virtual.Device
	rec   *recorder        // the pool's backend: dev, recording the sizes asked of it
	live  []gpualloc.Block // in the order allocated
	freed []gpualloc.Block // recently freed, for invalid frees

	allocs, frees, ooms int64
	requested           int64
	allocated           int64
	peakAllocated       int64
	refuse              int // device mallocs the device was told to refuse and has not refused yet
}

// A recorder is a backend that records the size of every Malloc asked of
// it, granted or refused.
type recorder struct {
	*virtual.Device
	asked []int64
}

func (r *recorder) Malloc(size int64) (uint64, error) {
	r.asked = append(r.asked, size)
	return r.Device.Malloc(size)
}

func newDriver(c Config, capacity int64) (*driver, error) {
	dev := strategytest.NewDevice(capacity)
	rec := &recorder{Device: dev}
	p, err := New(rec, c)
	if err != nil {
		return nil, err
	}
	return &driver{p: p, dev: dev, rec: rec}, nil
}

// failMallocs tells the device to refuse the next n mallocs.
func (d *driver) failMallocs(n int) {
	d.dev.FailMallocs(n)
	d.refuse = n
}

// A growth is what taking a new arena should do: the sizes asked of the
// device in turn, the one it grants (0 if none), and the empty arenas
// returned to it on the way.
type growth struct {
	asked           []int64
	granted         int64
	released, frees int64 // bytes and number of the empty arenas returned
	retried         bool
}

// expectGrowth works out by brute force what taking an arena for a block of
// size block should do, from the device's free bytes, the mallocs it was
// told to refuse and the pool's arenas: ask for an arena of Arena bytes (or
// of the block's size if larger); if refused, return the empty arenas and
// ask again; if refused again, ask for halves of it down to the block's
// size, and take the first the device grants.
func (d *driver) expectGrowth(block int64) growth {
	var g growth
	free, _ := d.dev.MemInfo()
	refuse := d.refuse
	try := func(size int64) bool {
		g.asked = append(g.asked, size)
		if refuse > 0 {
			refuse--
			return false
		}
		if size > free {
			return false
		}
		g.granted = size
		return true
	}
	size := max(d.p.c.Arena, block)
	if try(size) {
		return g
	}
	for _, a := range d.p.arenas {
		if a.root != 0 && d.p.nodes[a.root].state == stateFree {
			g.released += a.size
			g.frees++
		}
	}
	free += g.released
	g.retried = true
	if try(size) {
		return g
	}
	for size > block {
		size /= 2
		if try(size) {
			return g
		}
	}
	return g
}

// verify checks the pool's structure (see check) and compares its live
// blocks and counters with the driver's.
func (d *driver) verify() error {
	blocks, err := check(d.p)
	if err != nil {
		return err
	}
	want := slices.Clone(d.live)
	slices.SortFunc(want, func(a, b gpualloc.Block) int { return cmp.Compare(a.Addr, b.Addr) })
	if !slices.Equal(blocks, want) {
		return fmt.Errorf("live blocks in the pool:\n\t%v\nhanded out and not freed:\n\t%v", blocks, want)
	}
	st, ds := d.p.Stats(), d.dev.Stats()
	switch {
	case st.Allocs != d.allocs || st.Frees != d.frees || st.OOMs != d.ooms:
		return fmt.Errorf("Stats: Allocs %d, Frees %d, OOMs %d; want %d, %d, %d", st.Allocs, st.Frees, st.OOMs, d.allocs, d.frees, d.ooms)
	case st.Requested != d.requested || st.Allocated != d.allocated || st.PeakAllocated != d.peakAllocated:
		return fmt.Errorf("Stats: Requested %d, Allocated %d, PeakAllocated %d; want %d, %d, %d",
			st.Requested, st.Allocated, st.PeakAllocated, d.requested, d.allocated, d.peakAllocated)
	case st.Reserved != ds.Used || d.p.held != ds.Used || st.DeviceMallocs != ds.Mallocs || st.DeviceFrees != ds.Frees:
		return fmt.Errorf("Stats %+v, held %d, do not match the device's %+v", st, d.p.held, ds)
	case ds.InvalidCalls != 0:
		return fmt.Errorf("invalid device call: %v", d.dev.Err())
	case st.Retries > ds.FailedMallocs:
		return fmt.Errorf("Retries %d, but the device refused %d mallocs", st.Retries, ds.FailedMallocs)
	}
	return nil
}

// alloc allocates size bytes. The pool may run out of memory only when no
// free block is large enough, and takes a new arena only then, asking the
// device for exactly the sizes that expectGrowth works out.
func (d *driver) alloc(size int64) error {
	largest, _ := d.p.FreeSpace()
	rounded := d.p.c.RoundSize(size)
	var want growth
	if rounded != 0 && largest < rounded {
		want = d.expectGrowth(rounded)
	}
	ds0, st0 := d.dev.Stats(), d.p.Stats()
	mallocs := ds0.Mallocs
	d.rec.asked = d.rec.asked[:0]
	b, err := d.p.Alloc(size)
	d.refuse -= min(d.refuse, len(d.rec.asked))
	ds1, st1 := d.dev.Stats(), d.p.Stats()
	switch {
	case !slices.Equal(d.rec.asked, want.asked):
		return fmt.Errorf("Alloc(%d) with the largest free block of %d bytes asked the device for %v; want %v",
			size, largest, d.rec.asked, want.asked)
	case ds1.Frees-ds0.Frees != want.frees || st1.Retries-st0.Retries != int64(b2i(want.retried)):
		return fmt.Errorf("Alloc(%d) asking the device for %v made %d device frees and %d retries; want %d and %v",
			size, want.asked, ds1.Frees-ds0.Frees, st1.Retries-st0.Retries, want.frees, want.retried)
	case err == nil && ds1.MallocBytes-ds0.MallocBytes != want.granted:
		return fmt.Errorf("Alloc(%d) asking the device for %v took an arena of %d bytes; want %d",
			size, want.asked, ds1.MallocBytes-ds0.MallocBytes, want.granted)
	}
	switch {
	case errors.Is(err, gpualloc.ErrOutOfMemory):
		if largest >= rounded && rounded != 0 {
			return fmt.Errorf("Alloc(%d): out of memory with a free block of %d bytes", size, largest)
		}
		if want.granted != 0 {
			return fmt.Errorf("Alloc(%d): out of memory, but the device had an arena of %d bytes to give", size, want.granted)
		}
		d.ooms++
		return d.verify()
	case err != nil:
		return fmt.Errorf("Alloc(%d): %v", size, err)
	case b.Size != rounded || b.Requested != size:
		return fmt.Errorf("Alloc(%d) = %+v, want Size %d", size, b, rounded)
	}
	if grew := d.dev.Stats().Mallocs != mallocs; grew != (largest < rounded) {
		return fmt.Errorf("Alloc(%d): device malloc %v with the largest free block of %d bytes", size, grew, largest)
	}
	d.live = append(d.live, b)
	d.allocs++
	d.requested += size
	d.allocated += b.Size
	d.peakAllocated = max(d.peakAllocated, d.allocated)
	if err := d.verify(); err != nil {
		return fmt.Errorf("after Alloc(%d) = %+v: %w", size, b, err)
	}
	return nil
}

// free frees the i-th live block.
func (d *driver) free(i int) error {
	b := d.live[i]
	if err := d.p.Free(b); err != nil {
		return fmt.Errorf("Free(%+v): %v", b, err)
	}
	d.live = slices.Delete(d.live, i, i+1)
	if len(d.freed) == 8 {
		d.freed = d.freed[1:]
	}
	d.freed = append(d.freed, b)
	d.frees++
	d.requested -= b.Requested
	d.allocated -= b.Size
	if err := d.verify(); err != nil {
		return fmt.Errorf("after Free(%+v): %w", b, err)
	}
	return nil
}

// invalidFree frees a block that is not live, chosen by x: a block freed
// before, a live block with one field changed, or nonsense. It must fail and
// change nothing.
func (d *driver) invalidFree(x uint64) error {
	var b gpualloc.Block
	switch {
	case x%4 == 0 && len(d.freed) > 0:
		b = d.freed[(x/4)%uint64(len(d.freed))]
	case len(d.live) > 0:
		b = d.live[(x/4)%uint64(len(d.live))]
		switch x % 4 {
		case 1:
			b.Size *= 2
		case 2:
			b.Requested--
		case 3:
			b.Addr += uint64(d.p.c.MinBlock)
		default:
			b.Handle += 1 << 32
		}
	default:
		b = gpualloc.Block{Addr: virtual.Base, Size: 512, Requested: 1, Handle: x}
	}
	before, st := describe(d.p), d.p.Stats()
	err := d.p.Free(b)
	if !errors.Is(err, gpualloc.ErrInvalidFree) {
		return fmt.Errorf("Free(%+v) of a block that is not live: %v, want ErrInvalidFree", b, err)
	}
	if after := describe(d.p); !slices.Equal(after.Arenas, before.Arenas) || after.Lists != before.Lists || d.p.Stats() != st {
		return fmt.Errorf("Free(%+v) of a block that is not live changed the pool: %v, was %v", b, after, before)
	}
	return d.verify()
}

func (d *driver) release() error {
	if err := d.p.ReleaseAll(); err != nil {
		return fmt.Errorf("ReleaseAll: %v", err)
	}
	if err := d.verify(); err != nil {
		return fmt.Errorf("after ReleaseAll: %w", err)
	}
	for _, a := range d.p.arenas {
		if a.root != 0 && d.p.nodes[a.root].state == stateFree {
			return fmt.Errorf("after ReleaseAll: an empty arena of %d bytes at %#x is still held", a.size, a.base)
		}
	}
	return nil
}

// drain frees everything and releases the arenas: the device must end
// empty.
func (d *driver) drain() error {
	d.failMallocs(0)
	for len(d.live) > 0 {
		if err := d.free(len(d.live) - 1); err != nil {
			return err
		}
	}
	if err := d.release(); err != nil {
		return err
	}
	if ds := d.dev.Stats(); ds.Used != 0 || ds.Regions != 0 {
		return fmt.Errorf("after freeing everything and ReleaseAll, the device holds %d bytes", ds.Used)
	}
	return nil
}

// randomSize draws a request: log-uniform in [1, maxSize] or a power of two
// and its neighbours.
func randomSize(r *rand.Rand, maxSize int64) int64 {
	if r.IntN(3) == 0 {
		return min(max(int64(1)<<r.IntN(bits.Len64(uint64(maxSize)))+r.Int64N(3)-1, 1), maxSize)
	}
	return min(max(int64(math.Exp(r.Float64()*math.Log(float64(maxSize)))), 1), maxSize)
}

func TestRandomTraces(t *testing.T) {
	configs := []struct {
		c        Config
		capacity int64
		maxSize  int64
	}{
		{Config{MinBlock: 512, Arena: 64 << 10}, 1 << 20, 200 << 10},
		{Config{MinBlock: 1, Arena: 1024}, 16 << 10, 3000},
		{Config{MinBlock: 4096, Arena: 1 << 20}, 12 << 20, 3 << 20},
		{Config{MinBlock: 512, Arena: 512}, 64 << 10, 5000},
		{DefaultConfig(), 5 << 30, 3 << 30},
		// Devices smaller than one arena: smaller arenas, halving down to
		// the block's size.
		{Config{MinBlock: 512, Arena: 1 << 20}, 300 << 10, 100 << 10},
		{DefaultConfig(), 700 << 20, 300 << 20},
	}
	ops := 4000
	if testing.Short() {
		ops = 500
	}
	for _, cfg := range configs {
		for seed := uint64(1); seed <= 3; seed++ {
			t.Run(fmt.Sprintf("min_block=%d,arena=%d,seed=%d", cfg.c.MinBlock, cfg.c.Arena, seed), func(t *testing.T) {
				d, err := newDriver(cfg.c, cfg.capacity)
				if err != nil {
					t.Fatal(err)
				}
				r := rand.New(rand.NewPCG(seed, 0xb0dd1))
				target := 1
				for i := range ops {
					if i%300 == 0 {
						target = 1 + r.IntN(200)
					}
					pAlloc := 0.3
					if len(d.live) < target {
						pAlloc = 0.75
					}
					var err error
					switch x := r.Float64(); {
					case x < 0.01:
						err = d.release()
					case x < 0.02:
						err = d.invalidFree(r.Uint64())
					case x < 0.025:
						d.failMallocs(1 + r.IntN(2))
					case len(d.live) == 0 || x < pAlloc:
						err = d.alloc(randomSize(r, cfg.maxSize))
					default:
						err = d.free(r.IntN(len(d.live)))
					}
					if err != nil {
						t.Fatalf("op %d: %v", i, err)
					}
				}
				if err := d.drain(); err != nil {
					t.Fatal(err)
				}
				if d.ooms == 0 {
					t.Log("no allocation ran out of memory")
				}
			})
		}
	}
}

// FuzzOps runs operations that the input spells, two bytes each, on a pool
// of 16 KiB arenas on a device of 96 KiB, and checks every invariant after
// every one.
func FuzzOps(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzOps(t, Config{MinBlock: 512, Arena: 16 << 10}, 96<<10, data)
	})
}

// FuzzOpsSmallDevice is FuzzOps on a device of 88 KiB, smaller than one
// arena of 128 KiB: every arena is a smaller one.
func FuzzOpsSmallDevice(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzOps(t, Config{MinBlock: 512, Arena: 128 << 10}, 88<<10, data)
	})
}

func addSeeds(f *testing.F) {
	f.Add([]byte{0, 0, 0, 1, 0, 2, 5, 0, 5, 0, 5, 0})
	f.Add([]byte{0, 200, 0, 255, 0, 230, 7, 0, 0, 10, 4, 1, 6, 3, 7, 0})
	f.Add([]byte{0, 40, 0, 40, 0, 40, 0, 40, 0, 40, 0, 40, 5, 2, 5, 1, 3, 9, 0, 250})
	f.Add([]byte{2, 1, 0, 255, 0, 255, 0, 255, 0, 255, 0, 255, 0, 255, 7, 0, 0, 240})
}

// fuzzOps runs the operations data spells on a pool with configuration c on
// a device of capacity bytes.
func fuzzOps(t *testing.T, c Config, capacity int64, data []byte) {
	d, err := newDriver(c, capacity)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(data); i += 2 {
		op, arg := data[i], data[i+1]
		var err error
		switch {
		case op < 4 || len(d.live) == 0:
			// Sizes from 1 byte to 64 KiB, dense below 1 KiB and around
			// powers of two.
			size := int64(arg)*int64(arg) + int64(op&3)
			if arg >= 224 {
				size = int64(1)<<(arg-224+2) + int64(op&3) - 1
			}
			err = d.alloc(max(min(size, 64<<10), 1))
		case op < 7:
			err = d.free(int(arg) % len(d.live))
		case op == 7:
			err = d.release()
		case op == 8:
			d.failMallocs(int(arg % 3))
		default:
			err = d.invalidFree(uint64(arg) | uint64(op)<<8)
		}
		if err != nil {
			t.Fatalf("op %d (%d, %d): %v", i/2, op, arg, err)
		}
	}
	if err := d.drain(); err != nil {
		t.Fatal(err)
	}
}
