package gmlake

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/backend/virtual"
	"github.com/gpualloc/gpualloc/strategy/strategytest"
)

// check verifies the allocator's invariants: free bytes add up; a free
// pBlock is in its pool and, in a segment with mappings, has only free
// chunks; a lent pBlock has only used chunks; every sBlock's free count is
// that of its chunks, and it is in its pool's reusable set exactly when it
// is not live and all its chunks are free; a segment's mapping count is
// that of its chunks' sBlocks.
func (a *Allocator) check() error {
	var free int64
	for si := range a.cache.Segs {
		s := &a.cache.Segs[si]
		if s.Size == 0 {
			continue
		}
		var maps int
		for _, c := range s.X.chunks {
			maps += len(a.chunks[c].sb)
		}
		if maps != s.X.mapped {
			return fmt.Errorf("segment %#x: %d mappings counted, %d found", s.Addr, s.X.mapped, maps)
		}
		var size int64
		for n := s.First; n != 0; n = a.cache.Nodes[n].Next {
			nd, mt := &a.cache.Nodes[n], a.cache.Meta[n]
			size += nd.Size
			if nd.Free {
				free += nd.Size
			}
			if mt.Small || s.X.mapped == 0 {
				continue
			}
			_, f, l := a.chunkRange(n)
			for _, c := range s.X.chunks[f:l] {
				ch := &a.chunks[c]
				if ch.owner != n {
					return fmt.Errorf("chunk %d of block %#x: owner %d, want %d", c, nd.Addr, ch.owner, n)
				}
				if ch.used == nd.Free {
					return fmt.Errorf("chunk %d of block %#x (free %t, lent %t): used %t", c, nd.Addr, nd.Free, mt.X.lent, ch.used)
				}
			}
		}
		if size != s.Size {
			return fmt.Errorf("segment %#x: blocks of %d bytes, segment of %d", s.Addr, size, s.Size)
		}
	}
	if free != a.cache.FreeBytes {
		return fmt.Errorf("free bytes: %d counted, %d found", a.cache.FreeBytes, free)
	}
	for o := int32(1); o < int32(len(a.sb)); o++ {
		s := &a.sb[o]
		if s.chunks == nil {
			continue
		}
		var freeN, mapped int
		for _, c := range s.chunks {
			if c < 0 {
				continue
			}
			mapped++
			if !a.chunks[c].used {
				freeN++
			}
		}
		if !s.live && !s.doomed && freeN != s.freeN {
			return fmt.Errorf("sBlock %#x: %d free chunks counted, %d found", a.sbNodes[o].Addr, s.freeN, freeN)
		}
		reusable := !s.live && !s.doomed && freeN == len(s.chunks)
		if reusable != s.inSet {
			return fmt.Errorf("sBlock %#x: reusable %t, in the set %t", a.sbNodes[o].Addr, reusable, s.inSet)
		}
		if s.live {
			for _, c := range s.chunks[:s.used] {
				if c < 0 || !a.chunks[c].used {
					return fmt.Errorf("sBlock %#x: live, with a chunk of its block not in use", a.sbNodes[o].Addr)
				}
			}
		}
	}
	return nil
}

// run drives a on dev with the operations ops encodes (two bytes each)
// and checks the invariants and the device after each one.
func run(a *Allocator, dev *virtual.Device, ops []byte) error {
	var live []gpualloc.Block
	for i := 0; i+1 < len(ops); i += 2 {
		k, x := ops[i], int64(ops[i+1])
		var err error
		switch {
		case k < 150 || len(live) == 0:
			// Sizes of 1 to 64 MiB in 1 MiB steps, most on the 2 MiB
			// chunks, some small.
			size := (x%64 + 1) * (1 << 20)
			if k%5 == 0 {
				size = x*97 + 1
			}
			var b gpualloc.Block
			b, err = a.AllocStream(size, uint64(k%2))
			if errors.Is(err, gpualloc.ErrOutOfMemory) {
				err = nil
			} else if err == nil {
				live = append(live, b)
			}
		case k < 250:
			j := int(x) % len(live)
			err = a.Free(live[j])
			live[j] = live[len(live)-1]
			live = live[:len(live)-1]
		default:
			err = a.ReleaseAll()
		}
		if err != nil {
			return fmt.Errorf("op %d: %w", i/2, err)
		}
		if err := a.check(); err != nil {
			return fmt.Errorf("op %d: %w", i/2, err)
		}
		if err := dev.Err(); err != nil {
			return fmt.Errorf("op %d: %w", i/2, err)
		}
		for _, b := range live {
			if !dev.Holds(b.Addr, b.Size) {
				return fmt.Errorf("op %d: block %#x+%d not in memory held", i/2, b.Addr, b.Size)
			}
		}
	}
	for _, b := range live {
		if err := a.Free(b); err != nil {
			return err
		}
	}
	if err := a.ReleaseAll(); err != nil {
		return err
	}
	if st := dev.Stats(); st.Used != 0 || st.Ranges != 0 {
		return fmt.Errorf("after everything was freed and released the device holds %d bytes, %d ranges", st.Used, st.Ranges)
	}
	return a.check()
}

func stitchingConfigs() []Config {
	c := DefaultConfig()
	c.FragLimit = 0
	l1 := c
	l1.DefragLevel = 1
	gc := c
	gc.AutoGC = 100 << 20
	r := c
	r.ReuseLimit = 1.5
	return []Config{c, l1, gc, r, DefaultConfig()}
}

// TestRandomInvariants replays random traces that stitch often, on a
// device small enough to run out, and checks every invariant after every
// operation.
func TestRandomInvariants(t *testing.T) {
	for ci, c := range stitchingConfigs() {
		for seed := range uint64(20) {
			rng := rand.New(rand.NewPCG(seed, uint64(ci)))
			ops := make([]byte, 4000)
			for i := range ops {
				ops[i] = byte(rng.IntN(256))
			}
			dev := strategytest.NewDevice(512 << 20)
			a, err := New(dev, c)
			if err != nil {
				t.Fatal(err)
			}
			if err := run(a, dev, ops); err != nil {
				t.Fatalf("config %+v, seed %d: %v", c, seed, err)
			}
		}
	}
}

// FuzzOps checks the invariants on traces the fuzzer makes.
func FuzzOps(f *testing.F) {
	f.Add([]byte{10, 11, 20, 12, 160, 0, 160, 0, 30, 20, 255, 0})
	f.Add([]byte{10, 13, 10, 11, 10, 9, 160, 0, 160, 1, 160, 0, 10, 30, 160, 0, 10, 25, 255, 0})
	f.Fuzz(func(t *testing.T, ops []byte) {
		for _, c := range stitchingConfigs()[:3] {
			dev := strategytest.NewDevice(256 << 20)
			a, err := New(dev, c)
			if err != nil {
				t.Fatal(err)
			}
			if err := run(a, dev, ops); err != nil {
				t.Fatalf("config %+v: %v", c, err)
			}
		}
	})
}
