package tlsf

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/internal/segment"
	"github.com/gpualloc/gpualloc/strategy/internal/segment/segmenttest"
	"github.com/gpualloc/gpualloc/strategy/strategytest"
)

// randomConfigs are the configurations of the random tests and the fuzz
// target: small segments on a small device, so that traces run out of
// memory, release segments and retry.
var randomConfigs = []Config{
	{Round: 512, MinBlock: 512, Chunk: 4 * MiB},
	{Round: 512, MinBlock: 512, Chunk: 1},
	{Round: 256, MinBlock: 1024, Chunk: 2 * MiB},
	{Round: 4096, MinBlock: 4096, Chunk: 16 * MiB},
}

func drive(c Config, ops []byte) error {
	dev := strategytest.NewDevice(64 * MiB)
	p, err := New(dev, c)
	if err != nil {
		return err
	}
	return segmenttest.Drive(p, dev, ops, segmenttest.Options{Check: p.check, WantSize: c.RoundSize, MaxShift: 22})
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
	f.Fuzz(func(t *testing.T, config uint8, ops []byte) {
		ops = ops[:min(len(ops), 3*500)] // a few hundred operations reach every state; more only slow the fuzzer
		c := randomConfigs[int(config)%len(randomConfigs)]
		if err := drive(c, ops); err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
	})
}

// TestGoodFitChoice checks on random operations that every Alloc takes a
// block of the first non-empty size class at or after SearchClass of the
// rounded size, and grows only when there is none, as a brute-force search
// of the free blocks before the Alloc finds.
func TestGoodFitChoice(t *testing.T) {
	c := Config{Round: 512, MinBlock: 512, Chunk: 8 * MiB}
	p, err := New(strategytest.NewDevice(256*MiB), c)
	if err != nil {
		t.Fatal(err)
	}
	classIndex := func(size int64) int {
		fl, sl := segment.Class(size)
		return fl<<segment.SLBits | sl
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
		fl, sl := segment.SearchClass(rounded)
		from := fl<<segment.SLBits | sl
		want := -1 // the first non-empty class at or after from
		free := map[uint64]int{}
		for _, s := range p.h.Layout() {
			addr := s.Addr
			for _, b := range s.Blocks {
				if b.Free {
					free[addr] = classIndex(b.Size)
					if k := classIndex(b.Size); k >= from && (want < 0 || k < want) {
						want = k
					}
				}
				addr += uint64(b.Size)
			}
		}
		b, err := p.Alloc(size)
		if err != nil {
			t.Fatalf("op %d: %v", i, err)
		}
		live = append(live, b)
		got, hit := free[b.Addr]
		switch {
		case want < 0 && hit:
			t.Fatalf("op %d: Alloc(%d) took a free block of class %d; brute force finds none at or after %d", i, size, got, from)
		case want >= 0 && got != want:
			t.Fatalf("op %d: Alloc(%d) took a block of class %d (hit: %v), want class %d", i, size, got, hit, want)
		case hit:
			hits++
		}
	}
	if hits < 5000 {
		t.Errorf("only %d allocations were served from free blocks", hits)
	}
}
