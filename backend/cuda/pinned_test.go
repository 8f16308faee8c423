package cuda

import (
	"errors"
	"strings"
	"testing"

	"github.com/gpualloc/gpualloc"
)

// openPinnedFake opens pinned memory on the fake driver with the given
// limit (0: the fake machine's 64 GiB).
func openPinnedFake(t *testing.T, f *fakeGPU, capacity int64) *PinnedBackend {
	t.Helper()
	p, err := openPinned(f.driver(), PinnedOptions{Capacity: capacity}, func() (int64, error) { return 64 * GiB, nil })
	if err != nil {
		t.Fatalf("openPinned: %v", err)
	}
	return p
}

func TestPinned(t *testing.T) {
	f := newFakeGPU(GiB)
	p := openPinnedFake(t, f, 0)
	if free, total := p.MemInfo(); free != 64*GiB || total != 64*GiB {
		t.Errorf("MemInfo() = %d, %d, want the machine's memory", free, total)
	}
	if got, want := p.Name(), "pinned host memory (Fake GPU 80GB)"; got != want {
		t.Errorf("Name() = %q, want %q", got, want)
	}
	a, err := p.Malloc(5000)
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.Malloc(MiB)
	if err != nil {
		t.Fatal(err)
	}
	if a == b || f.host[a] != 5000 || f.host[b] != MiB {
		t.Errorf("Malloc gave %#x and %#x; the driver holds %v", a, b, f.host)
	}
	if free, _ := p.MemInfo(); free != 64*GiB-5000-MiB {
		t.Errorf("MemInfo() free = %d after two allocations", free)
	}
	if f.used != 0 {
		t.Errorf("pinned memory took %d bytes of device memory", f.used)
	}
	f.forgetContexts(true) // other code switched contexts: the backend sets its own
	if err := p.Free(a, 5000); err != nil {
		t.Fatal(err)
	}
	if n, bytes := p.InUse(); n != 1 || bytes != MiB {
		t.Errorf("InUse() = %d, %d", n, bytes)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if len(f.host) != 0 || f.retain != 0 {
		t.Errorf("after Close the driver holds %v and the context is retained %d times", f.host, f.retain)
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := p.Malloc(1); !errors.Is(err, ErrClosed) {
		t.Errorf("Malloc after Close = %v, want ErrClosed", err)
	}
}

func TestPinnedErrors(t *testing.T) {
	f := newFakeGPU(GiB)
	p := openPinnedFake(t, f, 10*KiB)
	defer p.Close()
	a, err := p.Malloc(6 * KiB)
	if err != nil {
		t.Fatal(err)
	}
	calls := f.callCount(fnMemAllocHost)
	tests := []struct {
		name string
		err  error
		is   error
		msg  string
	}{
		{"beyond the limit", second(p.Malloc(5 * KiB)), gpualloc.ErrOutOfMemory,
			"cuda: pinned memory (device 0): malloc of 5120 bytes: 6144 of the limit of 10240 bytes held: out of memory"},
		{"zero size", second(p.Malloc(0)), gpualloc.ErrInvalidSize,
			"cuda: pinned memory (device 0): malloc of 0 bytes: " + gpualloc.ErrInvalidSize.Error()},
		{"unknown address", p.Free(a+1, 6*KiB), gpualloc.ErrInvalidFree, "no allocation of this backend starts there"},
		{"wrong size", p.Free(a, 5*KiB), gpualloc.ErrInvalidFree, "it was allocated with 6144 bytes"},
	}
	for _, tt := range tests {
		if !errors.Is(tt.err, tt.is) || !strings.Contains(tt.err.Error(), tt.msg) {
			t.Errorf("%s: %v, want an error wrapping %v containing %q", tt.name, tt.err, tt.is, tt.msg)
		}
	}
	if got := f.callCount(fnMemAllocHost); got != calls {
		t.Errorf("refused calls reached the driver: %d calls of %s, want %d", got, fnMemAllocHost, calls)
	}

	// Driver failures: out of memory wraps gpualloc.ErrOutOfMemory; a
	// failed free keeps the allocation on the books.
	f.allocHostRC = errOutOfMemory
	if _, err := p.Malloc(KiB); !errors.Is(err, gpualloc.ErrOutOfMemory) ||
		err.Error() != "cuda: pinned memory (device 0): malloc of 1024 bytes: cuMemAllocHost_v2: CUDA_ERROR_OUT_OF_MEMORY: out of memory" {
		t.Errorf("Malloc when the driver has no room = %v", err)
	}
	f.freeHostRC = 700
	if err := p.Free(a, 6*KiB); err == nil || !strings.Contains(err.Error(), "cuMemFreeHost: CUDA_ERROR_ILLEGAL_ADDRESS") {
		t.Errorf("Free when the driver fails = %v", err)
	}
	if n, _ := p.InUse(); n != 1 {
		t.Errorf("InUse() = %d after a failed free, want 1", n)
	}
}

// second returns the error of a (value, error) pair.
func second[T any](_ T, err error) error { return err }

func TestOpenPinnedErrors(t *testing.T) {
	f := newFakeGPU(GiB)
	f.noHost = true
	_, err := openPinned(f.driver(), PinnedOptions{}, hostMemory)
	if !errors.Is(err, ErrNoDriver) || err.Error() !=
		"cuda: no usable CUDA driver for pinned memory (libfakecuda.so lacks cuMemAllocHost_v2, cuMemFreeHost)" {
		t.Errorf("openPinned without the host functions = %v", err)
	}
	f = newFakeGPU(GiB)
	_, err = openPinned(f.driver(), PinnedOptions{Device: 3}, hostMemory)
	if !errors.Is(err, ErrNoDevice) || f.retain != 0 {
		t.Errorf("openPinned of a missing device = %v (context retained %d times)", err, f.retain)
	}
	if _, err := OpenPinned(PinnedOptions{Capacity: -1}); err == nil || err.Error() != "cuda: pinned memory: negative capacity -1" {
		t.Errorf("OpenPinned with a negative capacity = %v", err)
	}
	_, err = openPinned(newFakeGPU(GiB).driver(), PinnedOptions{}, func() (int64, error) { return 0, errors.New("no sysinfo") })
	if err == nil || err.Error() != "cuda: pinned memory: no sysinfo" {
		t.Errorf("openPinned when the machine's memory is unknown = %v", err)
	}
}
