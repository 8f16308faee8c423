package cuda_test

import (
	"errors"
	"strings"
	"testing"
	"unsafe"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/backend/cuda"
	"github.com/gpualloc/gpualloc/traces"
)

// TestOpenPinnedWithoutGPU checks, where there is no GPU, that OpenPinned
// fails with one line wrapping ErrNoDriver or ErrNoDevice.
func TestOpenPinnedWithoutGPU(t *testing.T) {
	p, err := cuda.OpenPinned(cuda.PinnedOptions{})
	if err == nil {
		name := p.Name()
		p.Close()
		t.Skipf("pinned memory is available (%s): the checks of a machine without a GPU do not apply", name)
	}
	if !errors.Is(err, cuda.ErrNoDriver) && !errors.Is(err, cuda.ErrNoDevice) {
		t.Fatalf("OpenPinned without a GPU = %v, want an error wrapping ErrNoDriver or ErrNoDevice", err)
	}
	if msg := err.Error(); strings.ContainsAny(msg, "\r\n") || !strings.HasPrefix(msg, "cuda: ") {
		t.Errorf("error %q is not one line starting with %q", msg, "cuda: ")
	}
	t.Logf("OpenPinned: %v", err)
}

// pinnedLimit bounds the pinned memory the GPU tests hold: pinning is slow
// (about 0.35 s a GiB) and takes the machine's memory.
const pinnedLimit = 4 << 30

// openPinnedGPU opens pinned memory in device 0's context, limited to
// pinnedLimit, or skips the test where there is no GPU.
func openPinnedGPU(tb testing.TB) *cuda.PinnedBackend {
	tb.Helper()
	p, err := cuda.OpenPinned(cuda.PinnedOptions{Capacity: pinnedLimit})
	if errors.Is(err, cuda.ErrNoDriver) || errors.Is(err, cuda.ErrNoDevice) {
		tb.Skipf("needs an NVIDIA GPU and driver: %v", err)
	}
	if err != nil {
		tb.Fatalf("OpenPinned: %v", err)
	}
	tb.Cleanup(func() {
		if err := p.Close(); err != nil {
			tb.Errorf("Close: %v", err)
		}
	})
	return p
}

// TestGPUPinned allocates pinned memory, writes and reads every byte of it
// through its host address, and frees it.
func TestGPUPinned(t *testing.T) {
	p := openPinnedGPU(t)
	t.Logf("%s: limit %s", p.Name(), gpualloc.FormatSize(pinnedLimit))
	var addrs []uint64
	sizes := []int64{1, 4097, 2<<20 + 1, 64 << 20}
	for i, size := range sizes {
		a, err := p.Malloc(size)
		if err != nil {
			t.Fatalf("Malloc(%d): %v", size, err)
		}
		if a == 0 || a%256 != 0 {
			t.Errorf("Malloc(%d) = %#x, not a non-zero multiple of 256", size, a)
		}
		mem := hostBytes(a, size)
		for j := range mem {
			mem[j] = byte(i + j)
		}
		addrs = append(addrs, a)
	}
	for i, size := range sizes {
		mem := hostBytes(addrs[i], size)
		for j := range mem {
			if mem[j] != byte(i+j) {
				t.Fatalf("allocation %d of %d bytes: byte %d reads %d, want %d", i, size, j, mem[j], byte(i+j))
			}
		}
	}
	if _, err := p.Malloc(pinnedLimit); !errors.Is(err, gpualloc.ErrOutOfMemory) {
		t.Errorf("Malloc beyond the limit = %v, want an error wrapping ErrOutOfMemory", err)
	}
	for i, size := range sizes[:2] {
		if err := p.Free(addrs[i], size); err != nil {
			t.Errorf("Free(%#x, %d): %v", addrs[i], size, err)
		}
	}
	// Close frees the rest.
}

// TestGPUPinnedConformance runs the strategy conformance suite with every
// device call mirrored in pinned memory.
func TestGPUPinnedConformance(t *testing.T) { conformance(t, openPinnedGPU(t)) }

// TestGPUPinnedReplay replays a bundled trace with every strategy in
// pinned memory, against the simulator given the same addresses.
func TestGPUPinnedReplay(t *testing.T) {
	var bundles []traces.Bundle
	for _, bt := range traces.Bundled() {
		if bt.Name == "transformer-cpu" { // the smallest: unpooled pins every allocation
			bundles = append(bundles, bt)
		}
	}
	probe := openPinnedGPU(t)
	replayEveryStrategy(t, "pinned", bundles, pinnedLimit, func(int) (gpualloc.Backend, error) {
		return cuda.OpenPinned(cuda.PinnedOptions{Capacity: pinnedLimit})
	})
	if n, _ := probe.InUse(); n != 0 {
		t.Errorf("the probe holds %d allocations", n)
	}
}

// hostBytes returns the size bytes at host address addr, memory that the
// driver allocated outside Go's heap.
func hostBytes(addr uint64, size int64) []byte {
	p := uintptr(addr)
	return unsafe.Slice((*byte)(*(*unsafe.Pointer)(unsafe.Pointer(&p))), size)
}
