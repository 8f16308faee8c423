package pytorch_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/pytorch"
	"github.com/gpualloc/gpualloc/strategy/strategytest"
)

// TestNPURoundSize: torch_npu rounds the request plus 32 bytes, so that
// 512 bytes take a block of 1 KiB and 40 MiB one of 40 MiB + 512 bytes, in
// a segment of 42 MiB; CUDA's allocator gives 512 bytes and 40 MiB, in a
// segment of 40 MiB.
func TestNPURoundSize(t *testing.T) {
	cuda, npu := pytorch.DefaultConfig(), mustConf(t, "device:npu")
	for _, tt := range []struct{ in, cuda, npu int64 }{
		{1, 512, 512}, {480, 512, 512}, {481, 512, 1024}, {512, 512, 1024}, {40 * MiB, 40 * MiB, 40*MiB + 512},
	} {
		assert.Equal(t, tt.cuda, cuda.RoundSize(tt.in), "cuda %d", tt.in)
		assert.Equal(t, tt.npu, npu.RoundSize(tt.in), "npu %d", tt.in)
	}
	for _, tt := range []struct {
		conf string
		seg  int64
	}{{"", 40 * MiB}, {"device:npu", 42 * MiB}} {
		dev := strategytest.NewDevice(GiB)
		a, err := pytorch.New(dev, mustConf(t, tt.conf))
		require.NoError(t, err)
		alloc(t, a, 40*MiB, 0)
		assert.Equal(t, tt.seg, dev.Stats().Used, "%q", tt.conf)
	}
}

// TestNPUAlign: with expandable segments, torch_npu moves the block of a
// request of 2 MiB or more to the next multiple of 16 KiB; the bytes
// before it stay free in the pool, and a small request takes them. CUDA's
// allocator hands out the block where it lies.
func TestNPUAlign(t *testing.T) {
	for _, tt := range []struct {
		conf string
		gap  int64
	}{{es, 0}, {es + ",device:npu", 16*KiB - 1024}} {
		t.Run(tt.conf, func(t *testing.T) {
			for _, m := range modes {
				t.Run(m.name, func(t *testing.T) {
					a, dev := newExp(t, tt.conf, 8*GiB, m.vm)
					first := alloc(t, a, MiB+1024-32, 0) // 1 MiB + 1 KiB (CUDA: the same), from a page's start
					big := alloc(t, a, 3*MiB, 0)
					assert.Equal(t, uint64(tt.gap), big.Addr-first.End(), "gap before the block")
					// The gap is a free block of the large pool.
					_, total := a.FreeSpace()
					assert.Equal(t, 20*MiB-first.Size-big.Size, total)
					if tt.gap != 0 {
						assert.Zero(t, big.Addr%(16*KiB))
						gap := alloc(t, a, MiB+1024, 0) // does not fit the gap
						assert.Equal(t, big.End(), gap.Addr)
						require.NoError(t, a.Free(gap))
					}
					checkDevice(t, a, dev)
					require.NoError(t, a.Free(big))
					require.NoError(t, a.Free(first))
					require.NoError(t, a.ReleaseAll())
					assert.Zero(t, dev.Stats().Used)
				})
			}
		})
	}
	// A block that would not hold the request once aligned is not moved.
	a, _ := newExp(t, es+",device:npu", 8*GiB, true)
	first := alloc(t, a, 18*MiB-512-32, 0)
	last := alloc(t, a, 2*MiB+512-32, 0) // the page's last 2 MiB + 512: no room to move
	assert.Equal(t, first.End(), last.Addr)
	assert.NotZero(t, last.Addr%(16*KiB))
}

// TestDeviceConf: an item "deviceN.key:value" sets key for device N alone,
// after the other items; a bad one is an error whatever the device.
func TestDeviceConf(t *testing.T) {
	const conf = "device1.expandable_segments:False,expandable_segments:True,device:npu"
	c0, err := pytorch.ParseConfFor(conf, 0)
	require.NoError(t, err)
	c1, err := pytorch.ParseConfFor(conf, 1)
	require.NoError(t, err)
	assert.True(t, c0.ExpandableSegments)
	assert.False(t, c1.ExpandableSegments)
	assert.Equal(t, pytorch.NPU, c0.Device)
	assert.Equal(t, pytorch.NPU, c1.Device)
	for _, bad := range []string{"device1.expandable_segments:maybe", "device01.expandable_segments:True", "device-1.max_split_size_mb:64",
		"devicex.max_split_size_mb:64", "device1.nonsense:1", "device:tpu"} {
		_, err := pytorch.ParseConfFor(bad, 0)
		assert.Error(t, err, bad)
	}
	// The registry's allocator reads its device's index from its backend.
	for dev, want := range []bool{true, false} {
		getenv := func(k string) (string, bool) { return conf, k == "PYTORCH_ALLOC_CONF" }
		p, err := gpualloc.Select("pytorch", getenv)
		require.NoError(t, err)
		a, err := p.Open(indexed{strategytest.NewDevice(GiB), dev})
		require.NoError(t, err)
		assert.Equal(t, want, a.(*pytorch.Allocator).Config().ExpandableSegments, "device %d", dev)
		assert.Contains(t, a.(gpualloc.Specer).Spec(), ",device=npu")
	}
}

// indexed is a backend that says its device's index.
type indexed struct {
	gpualloc.Backend
	index int
}

func (b indexed) Index() int { return b.index }

// openSpec opens the allocator of spec on a fresh device.
func openSpec(spec string) (gpualloc.Allocator, error) {
	p, err := gpualloc.Select(spec, nil)
	if err != nil {
		return nil, err
	}
	return p.Open(strategytest.NewDevice(GiB))
}

// TestDeviceParam: the device parameter overrides the conf's, and a spec
// with device=npu reads back.
func TestDeviceParam(t *testing.T) {
	a, err := openSpec("pytorch:conf=device:npu,device=cuda")
	require.NoError(t, err)
	assert.Equal(t, pytorch.CUDA, a.(*pytorch.Allocator).Config().Device)
	assert.NotContains(t, a.(gpualloc.Specer).Spec(), "device=")

	a, err = openSpec("pytorch:device=npu")
	require.NoError(t, err)
	spec := a.(gpualloc.Specer).Spec()
	assert.Contains(t, spec, ",device=npu")
	assert.Contains(t, a.(*pytorch.Allocator).Models(), "torch_npu")
	assert.Contains(t, a.(*pytorch.Allocator).AllocatorSettings().Conf, "device:npu")
	b, err := openSpec(spec)
	require.NoError(t, err)
	assert.Equal(t, spec, b.(gpualloc.Specer).Spec())

	_, err = openSpec("pytorch:device=tpu")
	assert.ErrorContains(t, err, "want cuda or npu")
}

// FuzzParseConfFor checks that any conf parses or fails with an error, for
// any device, and that what the allocator records of an accepted one
// parses back to the same settings.
func FuzzParseConfFor(f *testing.F) {
	for _, s := range []string{"device:npu", "device1.expandable_segments:False,expandable_segments:True", "device0.device:npu",
		"device99999999999999999999.max_split_size_mb:64", "device.x:1", "max_split_size_mb:64,device2.roundup_power2_divisions:[1:2,>:4]"} {
		f.Add(s, 0)
		f.Add(s, 1)
	}
	f.Fuzz(func(t *testing.T, conf string, dev int) {
		c, err := pytorch.ParseConfFor(conf, dev)
		if err != nil {
			return
		}
		a, err := pytorch.New(strategytest.NewDevice(GiB), c)
		if err != nil {
			return // a setting out of range, which New rejects
		}
		back, err := pytorch.ParseConf(a.AllocatorSettings().Conf)
		require.NoError(t, err, "%q", a.AllocatorSettings().Conf)
		assert.Equal(t, c, back, "%q on device %d", conf, dev)
	})
}
