package bfc

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/internal/alloctest"
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

func TestRandomOps(t *testing.T) { segmenttest.RunRandomOps(t, randomConfigs, drive) }

// FuzzOps runs the operations the fuzzer makes up on a pool of one of
// randomConfigs, checking every invariant after every operation. The seeds
// are short (40 operations), so that the fuzzer's minimization of each new
// input, which can take a minute on long ones, stays quick.
func FuzzOps(f *testing.F) { segmenttest.FuzzRandomOps(f, randomConfigs, 40, drive) }

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
			hits := 0
			segmenttest.RandomAllocs(t, p, func(i int, size int64) gpualloc.Block {
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
				if want.Size == 0 {
					require.Equal(t, mallocs+1, p.Stats().DeviceMallocs, "op %d: no free chunk fits: a new region", i)
					return b
				}
				hits++
				require.Equal(t, want.Addr, b.Addr, "op %d: Alloc(%d) takes the chunk of %d bytes at %#x", i, size, want.Size, want.Addr)
				wantSize := want.Size
				if want.Size >= 2*rounded || want.Size-rounded >= p.maxFrag {
					wantSize = rounded
				}
				require.Equal(t, wantSize, b.Size, "op %d: Alloc(%d) from a chunk of %d bytes", i, size, want.Size)
				require.Equal(t, mallocs, p.Stats().DeviceMallocs)
				return b
			})
			require.NoError(t, p.check())
			require.Greater(t, hits, 5000)
		})
	}
}

func TestReleaseAllDeviceError(t *testing.T) {
	p, err := New(alloctest.Refusing{Device: strategytest.NewDevice(GiB)}, DefaultConfig())
	require.NoError(t, err)
	alloctest.ReleaseRefused(t, p, "bfc", p.check, p.layout, "F2M")
}
