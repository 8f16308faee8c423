package cuda_test

import (
	"errors"
	"testing"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/backend/cuda"
	"github.com/gpualloc/gpualloc/traces"
)

// openVirtualGPU opens device 0 with its virtual memory, or skips the test
// where there is no GPU or it has none.
func openVirtualGPU(tb testing.TB) *cuda.VirtualBackend {
	tb.Helper()
	b := openGPU(tb)
	v, err := b.Virtual()
	if errors.Is(err, cuda.ErrNoVirtualMemory) {
		tb.Skipf("needs CUDA's virtual memory management: %v", err)
	}
	if err != nil {
		tb.Fatalf("Virtual: %v", err)
	}
	return v
}

// TestGPUVirtualMemory runs each virtual memory call on a real device,
// with the rules' checks and out of memory.
func TestGPUVirtualMemory(t *testing.T) {
	v := openVirtualGPU(t)
	g := v.Granularity()
	t.Logf("%s: granularity %s", v.Name(), gpualloc.FormatSize(g))
	if g <= 0 || g&(g-1) != 0 {
		t.Fatalf("Granularity() = %d, not a power of two", g)
	}
	base, err := v.Reserve(4 * g)
	if err != nil {
		t.Fatal(err)
	}
	if base%uint64(g) != 0 {
		t.Errorf("Reserve returned %#x, not aligned to %d", base, g)
	}
	h1, err := v.Create(2 * g)
	if err != nil {
		t.Fatal(err)
	}
	h2, err := v.Create(g)
	if err != nil {
		t.Fatal(err)
	}
	// h2 at two addresses, as GMLake's stitching maps it.
	for _, m := range []struct {
		addr uint64
		h    uint64
	}{{base, h1}, {base + 2*uint64(g), h2}, {base + 3*uint64(g), h2}} {
		if err := v.Map(m.addr, m.h); err != nil {
			t.Fatalf("Map(%#x, %d): %v", m.addr, m.h, err)
		}
	}
	if err := v.Map(base+uint64(g), h2); !errors.Is(err, gpualloc.ErrInvalidFree) {
		t.Errorf("map over a mapping = %v, want an error wrapping ErrInvalidFree", err)
	}
	if err := v.Release(h1); !errors.Is(err, gpualloc.ErrInvalidFree) {
		t.Errorf("release of mapped memory = %v, want an error wrapping ErrInvalidFree", err)
	}
	_, total := v.MemInfo()
	if _, err := v.Create((total/g + 1) * g); !errors.Is(err, gpualloc.ErrOutOfMemory) {
		t.Errorf("create of more than the device = %v, want an error wrapping ErrOutOfMemory", err)
	}
	if r, h, bytes, m := v.VirtualInUse(); r != 1 || h != 2 || bytes != 3*g || m != 3 {
		t.Errorf("VirtualInUse() = %d, %d, %d, %d", r, h, bytes, m)
	}
	for _, m := range []struct {
		addr uint64
		size int64
	}{{base, 2 * g}, {base + 2*uint64(g), g}, {base + 3*uint64(g), g}} {
		if err := v.Unmap(m.addr, m.size); err != nil {
			t.Fatalf("Unmap(%#x, %d): %v", m.addr, m.size, err)
		}
	}
	for _, h := range []uint64{h1, h2} {
		if err := v.Release(h); err != nil {
			t.Fatal(err)
		}
	}
	if err := v.Unreserve(base, 4*g); err != nil {
		t.Fatal(err)
	}
	if r, h, bytes, m := v.VirtualInUse(); r+h+m != 0 || bytes != 0 {
		t.Errorf("VirtualInUse() = %d, %d, %d, %d after giving everything back", r, h, bytes, m)
	}
}

// TestGPUVirtualReplay replays the bundled traces with the strategies that
// use virtual memory on the GPU, and checks their figures against the
// simulator's device of the GPU's size.
func TestGPUVirtualReplay(t *testing.T) {
	probe := openVirtualGPU(t)
	free0, total := probe.MemInfo()
	for _, spec := range []string{"pytorch:expandable_segments=true", "gmlake"} {
		for _, bt := range traces.Bundled() {
			t.Run(spec+"/"+bt.Name, func(t *testing.T) {
				// Every device of the trace on device 0.
				s, c := cuda.ReplayBoth(t, bt, spec, total, 0, func(int) (gpualloc.Backend, error) {
					b, err := cuda.Open(cuda.Options{})
					if err != nil {
						return nil, err
					}
					v, err := b.Virtual()
					if err != nil {
						b.Close()
						return nil, err
					}
					return v, nil
				})
				if c.OOMs != 0 || s.OOMs != 0 {
					t.Skipf("out of memory (%d on the GPU, %d on the simulator): the figures need not agree", c.OOMs, s.OOMs)
				}
				for _, d := range cuda.DiffFigures(c, s, "peak reserved", "device mallocs", "device frees",
					"device maps", "device unmaps", "cache hits") {
					t.Error(d)
				}
				t.Logf("%d events, %d creates, %d maps, peak reserved %s, %.0f events/s",
					c.Events, c.DeviceMallocs, c.DeviceMaps, gpualloc.FormatSize(c.PeakReservedBytes), c.EventsPerSec)
			})
		}
	}
	if free, _ := probe.MemInfo(); free < free0-64<<20 {
		t.Errorf("free device memory fell from %d to %d bytes over the replays: a leak?", free0, free)
	}
}
