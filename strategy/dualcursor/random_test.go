package dualcursor

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/internal/alloctest"
	"github.com/gpualloc/gpualloc/strategy/strategytest"
)

// randomConfigs are the configurations of the random tests and the fuzz
// target: small device blocks on a small device, so that traces grow, run
// out of memory, release blocks and retry.
var randomConfigs = []Config{
	{Align: 512, Pad: 32, Block: 4 * MiB, Grow: GrowBlock, Static: Categories(gpualloc.CategoryParameter, gpualloc.CategoryOptimizerState)},
	{Align: 256, Pad: 0, Block: 1 * MiB, Grow: GrowBlock, Static: Categories(gpualloc.CategoryParameter), Unknown: UnknownDynamic, StaticEnd: EndLow},
	{Align: 4096, Pad: 100, Block: 16 * MiB, Grow: GrowBlock, Static: Categories(gpualloc.CategoryInput, gpualloc.CategoryGradient), Unknown: UnknownStatic},
	{Align: 512, Pad: 32, Block: 0, Grow: GrowNone, Static: Categories(gpualloc.CategoryParameter, gpualloc.CategoryOptimizerState)},
	{Align: 512, Pad: 32, Block: 24 * MiB, Grow: GrowNone, Static: Categories(gpualloc.CategoryParameter), StaticEnd: EndLow},
}

// An opSource supplies the choices of a random run: a PRNG, or the bytes of
// a fuzz input.
type opSource interface {
	IntN(n int) int
}

type byteSource struct {
	data []byte
	i    int
}

func (s *byteSource) IntN(n int) int {
	var v int
	for k := 0; k < 3; k++ {
		if s.i < len(s.data) {
			v = v<<8 | int(s.data[s.i])
			s.i++
		}
	}
	return v % n
}

func (s *byteSource) done() bool { return s.i >= len(s.data) }

// liveBlock is a block the random run holds, and the side it must lie on.
type liveBlock struct {
	b      gpualloc.Block
	static bool
}

// randomRun makes ops operations on a pool of configuration c on a device
// of capacity bytes, choosing them from src, and checks after every one the
// pool's invariants, the device's, and that each live block lies on the
// side its category (or the unknown rule, at its allocation) gave it.
func randomRun(c Config, capacity int64, ops int, src opSource, stop func() bool) error {
	dev := strategytest.NewDevice(capacity)
	p, err := New(dev, c)
	if err != nil {
		return err
	}
	var live []liveBlock
	for i := 0; i < ops && !stop(); i++ {
		var what string
		switch k := src.IntN(20); {
		case k < 10 || len(live) == 0:
			var size int64
			switch src.IntN(4) {
			case 0:
				size = 1 + int64(src.IntN(4096))
			case 1:
				size = 512*int64(1+src.IntN(64)) + int64(src.IntN(3)) - 1
			case 2:
				size = 1 + int64(src.IntN(8<<20))
			default:
				size = 1 + int64(src.IntN(256<<10))
			}
			size = max(size, 1)
			cat := gpualloc.Category(src.IntN(gpualloc.NumCategories))
			static := c.IsStatic(cat, p.freed)
			what = fmt.Sprintf("alloc of %d bytes (%s)", size, cat)
			b, err := p.AllocCategory(size, 0, cat)
			if errors.Is(err, gpualloc.ErrOutOfMemory) {
				break
			}
			if err != nil {
				return fmt.Errorf("op %d: %s: %w", i, what, err)
			}
			if b.Size != c.RoundSize(size) || b.Requested != size || b.Addr%uint64(c.Align) != 0 {
				return fmt.Errorf("op %d: %s: block %+v", i, what, b)
			}
			live = append(live, liveBlock{b, static})
		case k < 19:
			j := src.IntN(len(live))
			what = fmt.Sprintf("free of %#x", live[j].b.Addr)
			if err := p.Free(live[j].b); err != nil {
				return fmt.Errorf("op %d: %s: %w", i, what, err)
			}
			live[j] = live[len(live)-1]
			live = live[:len(live)-1]
		default:
			what = "release"
			if err := p.ReleaseAll(); err != nil {
				return fmt.Errorf("op %d: %w", i, err)
			}
		}
		if err := p.check(); err != nil {
			return fmt.Errorf("op %d: after %s: %w\n%s", i, what, err, p.layout())
		}
		if err := dev.Err(); err != nil {
			return fmt.Errorf("op %d: after %s: device: %w", i, what, err)
		}
		if st := p.Stats(); st.Reserved != dev.Stats().Used {
			return fmt.Errorf("op %d: after %s: reserved %d, the device holds %d", i, what, st.Reserved, dev.Stats().Used)
		}
		for _, lb := range live {
			n := *p.live.Get(lb.b.Handle, lb.b.Addr)
			if (p.sides[n] == p.staticSide) != lb.static {
				return fmt.Errorf("op %d: after %s: block at %#x on the wrong side (static %v)\n%s", i, what, lb.b.Addr, lb.static, p.layout())
			}
		}
	}
	for _, lb := range live {
		if err := p.Free(lb.b); err != nil {
			return err
		}
	}
	if err := p.ReleaseAll(); err != nil {
		return err
	}
	if err := p.check(); err != nil {
		return err
	}
	if used := dev.Stats().Used; used != 0 {
		return fmt.Errorf("the device holds %d bytes after every block was freed and released", used)
	}
	return nil
}

func TestRandomOps(t *testing.T) {
	ops := 5000
	if testing.Short() {
		ops = 1000
	}
	alloctest.ForSeeds(t, randomConfigs, 3, func(t *testing.T, i int, c Config, seed uint64) {
		r := rand.New(rand.NewPCG(seed, uint64(i)))
		if err := randomRun(c, 96*MiB, ops, r, func() bool { return false }); err != nil {
			t.Fatal(err)
		}
	})
}

// FuzzOps runs the operations the fuzzer makes up on a pool of one of
// randomConfigs, checking every invariant after every operation.
func FuzzOps(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add([]byte{3, 0, 0, 0, 0, 0, 0, 0, 5, 0, 255, 255, 255, 0, 0, 1, 0, 0, 19, 0, 0, 12})
	r := rand.New(rand.NewPCG(7, 7))
	for range 4 {
		b := make([]byte, 600)
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		c := randomConfigs[int(data[0])%len(randomConfigs)]
		src := &byteSource{data: data[1:]}
		if err := randomRun(c, 48*MiB, 2000, src, src.done); err != nil {
			t.Fatal(err)
		}
	})
}
