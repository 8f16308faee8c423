package bfc

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/internal/segment"
	"github.com/gpualloc/gpualloc/strategy/internal/segment/segmenttest"
	"github.com/gpualloc/gpualloc/strategy/strategytest"
)

// randomConfigs are the configurations of the random tests and the fuzz
// target, on a 64 MiB device with requests up to 8 MiB: growth that
// reaches the device's end, garbage collection on and off, one region of
// the limit, a limit below the device, and a fragmentation bound of about
// 650 KiB, so that traces run out of memory, back off, release regions and
// retry.
var randomConfigs = []Config{
	DefaultConfig(),
	{AllowGrowth: true, MemoryFraction: 1},
	{MemoryFraction: 0.5, GarbageCollection: true},
	{AllowGrowth: true, MemoryFraction: 1, MemoryLimit: 24 * MiB, GarbageCollection: true},
	{AllowGrowth: true, MemoryFraction: 0.75, GarbageCollection: true, FragmentationFraction: 0.01},
	{MemoryFraction: 1, MemoryLimit: 80 * MiB, GarbageCollection: true}, // a limit the device cannot meet: back-off
}

// drive runs ops on a pool of configuration c on a 64 MiB device, checking
// every invariant after every operation (see segmenttest.Drive).
func drive(c Config, ops []byte) error {
	dev := strategytest.NewDevice(64 * MiB)
	p, err := New(dev, c)
	if err != nil {
		return err
	}
	return segmenttest.Drive(p, dev, ops, segmenttest.Options{Check: p.check, MaxShift: 22})
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
// randomConfigs, checking every invariant after every operation. The seeds
// are short (40 operations), so that the fuzzer's minimization of each new
// input, which can take a minute on long ones, stays quick.
func FuzzOps(f *testing.F) {
	for i := range randomConfigs {
		f.Add(uint8(i), segmenttest.RandomOps(uint64(i), 40))
	}
	f.Fuzz(func(t *testing.T, config uint8, ops []byte) {
		ops = ops[:min(len(ops), 3*500)]
		c := randomConfigs[int(config)%len(randomConfigs)]
		if err := drive(c, ops); err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
	})
}

// TestFitAndSplitByBruteForce checks on random operations that every Alloc
// takes the chunk FindChunkPtr takes, found by a search of all free chunks:
// the smallest of at least the rounded size, the lowest address among
// those of its size; that it is split exactly when SplitChunk's rule says;
// and that a new region is taken only when no free chunk fits.
func TestFitAndSplitByBruteForce(t *testing.T) {
	for _, c := range []Config{DefaultConfig(), {AllowGrowth: true, MemoryFraction: 1, FragmentationFraction: 0.001}} {
		t.Run(fmt.Sprintf("fragmentation_fraction=%g", c.FragmentationFraction), func(t *testing.T) {
			dev := strategytest.NewDevice(512 * MiB)
			p, err := New(dev, c)
			require.NoError(t, err)
			r := rand.New(rand.NewPCG(7, 7))
			var live []gpualloc.Block
			hits := 0
			for i := range 20000 {
				if len(live) > 0 && r.IntN(2) == 0 {
					k := r.IntN(len(live))
					require.NoError(t, p.Free(live[k]))
					live[k] = live[len(live)-1]
					live = live[:len(live)-1]
					continue
				}
				size := int64(math.Exp(r.Float64() * math.Log(4<<20)))
				rounded := RoundedBytes(size)
				var best *segment.Node
				for n := 1; n < len(p.nodes); n++ {
					c := &p.nodes[n]
					if c.Size > 0 && c.Free && c.Size >= rounded &&
						(best == nil || c.Size < best.Size || c.Size == best.Size && c.Addr < best.Addr) {
						best = c
					}
				}
				var want segment.Node
				if best != nil {
					want = *best
				}
				mallocs := p.Stats().DeviceMallocs
				b, err := p.Alloc(size)
				require.NoError(t, err, "op %d", i)
				live = append(live, b)
				if want.Size == 0 {
					require.Equal(t, mallocs+1, p.Stats().DeviceMallocs, "op %d: no free chunk fits: a new region", i)
					continue
				}
				hits++
				require.Equal(t, want.Addr, b.Addr, "op %d: Alloc(%d) takes the chunk of %d bytes at %#x", i, size, want.Size, want.Addr)
				wantSize := want.Size
				if want.Size >= 2*rounded || want.Size-rounded >= p.maxFrag {
					wantSize = rounded
				}
				require.Equal(t, wantSize, b.Size, "op %d: Alloc(%d) from a chunk of %d bytes", i, size, want.Size)
				require.Equal(t, mallocs, p.Stats().DeviceMallocs)
			}
			require.NoError(t, p.check())
			require.Greater(t, hits, 5000)
		})
	}
}

// refusing is a device whose Free fails.
type refusing struct{ *strategytest.Device }

func (refusing) Free(uint64, int64) error { return errors.New("device busy") }

func TestReleaseAllDeviceError(t *testing.T) {
	p, err := New(refusing{strategytest.NewDevice(GiB)}, DefaultConfig())
	require.NoError(t, err)
	a, err := p.Alloc(1)
	require.NoError(t, err)
	require.NoError(t, p.Free(a))
	require.EqualError(t, p.ReleaseAll(), "bfc: release: device busy")
	require.NoError(t, p.check())
	require.Equal(t, "F2M", p.layout(), "the region the device refused to free stays")
}
