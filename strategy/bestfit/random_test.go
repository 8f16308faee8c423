package bestfit

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/internal/segment/segmenttest"
	"github.com/gpualloc/gpualloc/strategy/strategytest"
)

// randomConfigs are the configurations of the random tests and the fuzz
// target: small segments on a small device, so that traces run out of
// memory, release segments and retry.
var randomConfigs = []Config{
	{Round: 512, MinBlock: 512, SplitThreshold: 512, Grow: GrowChunk, Chunk: 4 * MiB},
	{Round: 512, MinBlock: 512, SplitThreshold: 512, Grow: GrowExact, Chunk: 1},
	{Round: 256, MinBlock: 256, SplitThreshold: 256, Grow: GrowDouble, Chunk: 256 * KiB},
	{Round: 256, MinBlock: 1024, SplitThreshold: 64 * KiB, Grow: GrowChunk, Chunk: 2 * MiB, Initial: 8 * MiB},
	{Round: 4096, MinBlock: 4096, SplitThreshold: 0, Grow: GrowDouble, Chunk: 1 * MiB, Initial: 1},
}

// drive runs ops on a pool of configuration c on a 64 MiB device, checking
// every invariant after every operation.
func drive(c Config, ops []byte) error {
	dev := strategytest.NewDevice(64 * MiB)
	p, err := New(dev, c)
	if err != nil {
		return err
	}
	opt := segmenttest.Options{Check: p.check, MaxShift: 22}
	if c.SplitThreshold <= c.Round {
		opt.WantSize = c.RoundSize
	}
	return segmenttest.Drive(p, dev, ops, opt)
}

func TestRandomOps(t *testing.T) {
	n := 4000
	if testing.Short() {
		n = 500
	}
	for i, c := range randomConfigs {
		for seed := uint64(1); seed <= 6; seed++ {
			t.Run(fmt.Sprintf("config=%d,seed=%d", i, seed), func(t *testing.T) {
				if err := drive(c, segmenttest.RandomOps(seed, n)); err != nil {
					t.Fatalf("%+v: %v", c, err)
				}
			})
		}
	}
}

// FuzzOps runs the operations the fuzzer makes up on a pool of one of
// randomConfigs, checking every invariant after every operation.
func FuzzOps(f *testing.F) {
	for i := range randomConfigs {
		f.Add(uint8(i), segmenttest.RandomOps(uint64(i), 300))
	}
	f.Add(uint8(0), []byte{0, 22, 255, 0, 22, 255, 0, 22, 255, 200, 0, 0, 200, 0, 0, 247, 0, 0})
	f.Fuzz(func(t *testing.T, config uint8, ops []byte) {
		ops = ops[:min(len(ops), 3*500)] // a few hundred operations reach every state; more only slow the fuzzer
		c := randomConfigs[int(config)%len(randomConfigs)]
		if err := drive(c, ops); err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
	})
}

// TestBestFitChoice checks on random operations that every Alloc served
// from the free blocks takes the best fit: the smallest free block of at
// least the rounded size, the lowest address among those of its size, as a
// brute-force search of the layout before the Alloc finds it.
func TestBestFitChoice(t *testing.T) {
	c := Config{Round: 512, MinBlock: 512, SplitThreshold: 512, Grow: GrowChunk, Chunk: 8 * MiB}
	p, err := New(strategytest.NewDevice(256*MiB), c)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(7, 7))
	var live []gpualloc.Block
	hits := 0
	for i := range 20000 {
		if len(live) > 0 && r.IntN(2) == 0 {
			k := r.IntN(len(live))
			if err := p.Free(live[k]); err != nil {
				t.Fatal(err)
			}
			live[k] = live[len(live)-1]
			live = live[:len(live)-1]
			continue
		}
		size := int64(math.Exp(r.Float64() * math.Log(4*MiB)))
		rounded := c.RoundSize(size)
		// The best fit, by brute force.
		var best struct {
			addr uint64
			size int64
		}
		for _, s := range p.h.Layout() {
			addr := s.Addr
			for _, b := range s.Blocks {
				if b.Free && b.Size >= rounded && (best.size == 0 || b.Size < best.size || b.Size == best.size && addr < best.addr) {
					best.addr, best.size = addr, b.Size
				}
				addr += uint64(b.Size)
			}
		}
		mallocs := p.Stats().DeviceMallocs
		b, err := p.Alloc(size)
		if err != nil {
			t.Fatalf("op %d: %v", i, err)
		}
		live = append(live, b)
		if best.size == 0 {
			if p.Stats().DeviceMallocs == mallocs {
				t.Fatalf("op %d: Alloc(%d) found a free block where brute force finds none", i, size)
			}
			continue
		}
		hits++
		if b.Addr != best.addr {
			t.Fatalf("op %d: Alloc(%d) took %#x; the best fit is %d bytes at %#x", i, size, b.Addr, best.size, best.addr)
		}
	}
	if hits < 5000 {
		t.Errorf("only %d allocations were served from free blocks", hits)
	}
}
