package cuda_test

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/backend/cuda"
	"github.com/gpualloc/gpualloc/backend/virtual"
	"github.com/gpualloc/gpualloc/sim"
	"github.com/gpualloc/gpualloc/strategy/bestfit"
	"github.com/gpualloc/gpualloc/strategy/naive"
	"github.com/gpualloc/gpualloc/strategy/strategytest"
	"github.com/gpualloc/gpualloc/traces"
)

// TestOpenWithoutGPU checks, where there is no GPU, that Open fails with one
// line wrapping ErrNoDriver or ErrNoDevice.
func TestOpenWithoutGPU(t *testing.T) {
	b, err := cuda.Open(cuda.Options{})
	if err == nil {
		name := b.Name()
		b.Close()
		t.Skipf("a CUDA device is present (%s): the checks of a machine without one do not apply", name)
	}
	if !errors.Is(err, cuda.ErrNoDriver) && !errors.Is(err, cuda.ErrNoDevice) {
		t.Fatalf("Open without a GPU = %v, want an error wrapping ErrNoDriver or ErrNoDevice", err)
	}
	msg := err.Error()
	if strings.ContainsAny(msg, "\r\n") {
		t.Errorf("error is more than one line: %q", msg)
	}
	if !strings.HasPrefix(msg, "cuda: ") {
		t.Errorf("error %q does not start with %q", msg, "cuda: ")
	}
	if errors.Is(err, cuda.ErrNoDriver) && !strings.Contains(msg, "libcuda.so") {
		t.Errorf("error %q does not name the library", msg)
	}
	t.Logf("Open: %v", err)

	// Devices and a second Open say the same.
	if _, err2 := cuda.Devices(); err2 == nil || err2.Error() != msg {
		t.Errorf("Devices() = %v, want %q", err2, msg)
	}
	if _, err2 := cuda.Open(cuda.Options{Device: 3}); err2 == nil ||
		!errors.Is(err2, cuda.ErrNoDriver) && !errors.Is(err2, cuda.ErrNoDevice) {
		t.Errorf("second Open = %v, want an error wrapping ErrNoDriver or ErrNoDevice", err2)
	}
}

// openGPU opens device 0, or skips the test where there is none.
func openGPU(tb testing.TB) *cuda.Backend {
	tb.Helper()
	b, err := cuda.Open(cuda.Options{})
	if errors.Is(err, cuda.ErrNoDriver) || errors.Is(err, cuda.ErrNoDevice) {
		tb.Skipf("needs an NVIDIA GPU and driver: %v", err)
	}
	if err != nil {
		tb.Fatalf("Open: %v", err)
	}
	tb.Cleanup(func() {
		if err := b.Close(); err != nil {
			tb.Errorf("Close: %v", err)
		}
	})
	return b
}

// TestGPUBackend checks the backend on a real device.
func TestGPUBackend(t *testing.T) {
	b := openGPU(t)
	free0, total := b.MemInfo()
	t.Logf("%s: %s free of %s", b.Name(), gpualloc.FormatSize(free0), gpualloc.FormatSize(total))
	if total <= 0 || free0 < 0 || free0 > total {
		t.Fatalf("MemInfo() = %d, %d", free0, total)
	}

	type region struct {
		addr uint64
		size int64
	}
	var live []region
	for _, size := range []int64{1, 255, 256, 4097, 2<<20 + 1, 64 << 20} {
		a, err := b.Malloc(size)
		if err != nil {
			t.Fatalf("Malloc(%d): %v", size, err)
		}
		if a == 0 || a%256 != 0 {
			t.Errorf("Malloc(%d) = %#x, not a non-zero multiple of 256", size, a)
		}
		for _, r := range live {
			if a < r.addr+uint64(r.size) && r.addr < a+uint64(size) {
				t.Errorf("Malloc(%d) = %#x overlaps %#x (%d bytes)", size, a, r.addr, r.size)
			}
		}
		live = append(live, region{a, size})
	}
	if free, _ := b.MemInfo(); free > free0-64<<20 {
		t.Logf("free memory went from %d to %d only after allocating more than 64 MiB (other processes?)", free0, free)
	}

	if _, err := b.Malloc(0); !errors.Is(err, gpualloc.ErrInvalidSize) {
		t.Errorf("Malloc(0) = %v, want an error wrapping gpualloc.ErrInvalidSize", err)
	}
	_, err := b.Malloc(total + 1<<30)
	var ce *cuda.Error
	if !errors.Is(err, gpualloc.ErrOutOfMemory) || !errors.As(err, &ce) || ce.Name != "CUDA_ERROR_OUT_OF_MEMORY" {
		t.Errorf("Malloc(more than the device) = %v, want CUDA_ERROR_OUT_OF_MEMORY wrapping gpualloc.ErrOutOfMemory", err)
	}
	if err := b.Free(live[1].addr, live[1].size+1); !errors.Is(err, gpualloc.ErrInvalidFree) {
		t.Errorf("Free with the wrong size = %v, want an error wrapping gpualloc.ErrInvalidFree", err)
	}

	// Free half; Close frees the rest.
	for _, r := range live[:3] {
		if err := b.Free(r.addr, r.size); err != nil {
			t.Errorf("Free(%#x, %d): %v", r.addr, r.size, err)
		}
	}
	if n, _ := b.InUse(); n != len(live)-3 {
		t.Errorf("InUse() = %d allocations, want %d", n, len(live)-3)
	}
	if err := b.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if n, _ := b.InUse(); n != 0 {
		t.Errorf("InUse() = %d allocations after Close", n)
	}

	// The device is still there for a new Backend.
	b2 := openGPU(t)
	a, err := b2.Malloc(1 << 20)
	if err != nil {
		t.Fatalf("Malloc after reopening: %v", err)
	}
	if err := b2.Free(a, 1<<20); err != nil {
		t.Fatalf("Free after reopening: %v", err)
	}
}

// A mirror is the conformance suite's checking device with every call
// repeated on the GPU: the strategy sees the checking device's addresses,
// which the suite checks, while the GPU gets the strategy's real sequence of
// cuMemAlloc and cuMemFree calls.
type mirror struct {
	check *virtual.Device
	gpu   held
	real  map[uint64]gpuRegion // by the checking device's address
}

// A gpuRegion is a GPU allocation behind one of the checking device's.
type gpuRegion struct {
	addr uint64
	size int64
}

func (m *mirror) Malloc(size int64) (uint64, error) {
	if size < 1 {
		return m.check.Malloc(size)
	}
	r, err := m.gpu.Malloc(size)
	if err != nil {
		return 0, err
	}
	a, err := m.check.Malloc(size)
	if err != nil {
		if ferr := m.gpu.Free(r, size); ferr != nil {
			return 0, ferr
		}
		return 0, err
	}
	m.real[a] = gpuRegion{r, size}
	return a, nil
}

func (m *mirror) Free(addr uint64, size int64) error {
	r, ok := m.real[addr]
	if !ok {
		return m.check.Free(addr, size) // the device reports the misuse
	}
	if err := m.check.Free(addr, size); err != nil {
		return err
	}
	delete(m.real, addr)
	return m.gpu.Free(r.addr, r.size)
}

func (m *mirror) MemInfo() (free, total int64) { return m.check.MemInfo() }

// release frees on the GPU what the strategy left allocated.
func (m *mirror) release() error {
	var errs []error
	for _, r := range m.real {
		errs = append(errs, m.gpu.Free(r.addr, r.size))
	}
	clear(m.real)
	return errors.Join(errs...)
}

// A held backend is a real one that counts what it holds: a
// *cuda.Backend or a *cuda.PinnedBackend.
type held interface {
	gpualloc.Backend
	InUse() (allocations int, bytes int64)
}

// TestGPUConformance runs the strategy conformance suite with every device
// call mirrored on the GPU.
func TestGPUConformance(t *testing.T) { conformance(t, openGPU(t)) }

// conformance runs the strategy conformance suite with every device call
// mirrored on gpu.
func conformance(t *testing.T, gpu held) {
	strategies := []struct {
		name string
		open func(b gpualloc.Backend) (gpualloc.Allocator, error)
		opt  strategytest.Options
	}{
		{"naive", func(b gpualloc.Backend) (gpualloc.Allocator, error) { return naive.New(b, naive.DefaultConfig()) },
			strategytest.Options{Caching: true, Align: virtual.Alignment, Seeds: []uint64{1, 2}}},
		{"bestfit", func(b gpualloc.Backend) (gpualloc.Allocator, error) { return bestfit.New(b, bestfit.DefaultConfig()) },
			strategytest.Options{Caching: true, Seeds: []uint64{1, 2}}},
	}
	for _, s := range strategies {
		t.Run(s.name, func(t *testing.T) {
			var prev *mirror
			strategytest.Run(t, func(b gpualloc.Backend) (gpualloc.Allocator, error) {
				if prev != nil {
					// The previous check is over: give its leftovers back.
					if err := prev.release(); err != nil {
						return nil, err
					}
				}
				dev, ok := b.(*virtual.Device)
				if !ok {
					return nil, fmt.Errorf("the suite opened the allocator on a %T, not a *virtual.Device", b)
				}
				prev = &mirror{check: dev, gpu: gpu, real: make(map[uint64]gpuRegion)}
				return s.open(prev)
			}, &s.opt)
			if prev != nil {
				if err := prev.release(); err != nil {
					t.Error(err)
				}
			}
			if n, bytes := gpu.InUse(); n != 0 {
				t.Errorf("the backend still holds %d allocations (%d bytes)", n, bytes)
			}
		})
	}
}

// BenchmarkMallocFree measures cuMemAlloc_v2 and cuMemFree_v2 by size, one
// pair per iteration, on an idle device. malloc-ns/op and free-ns/op split
// the time between the two calls.
func BenchmarkMallocFree(b *testing.B) {
	gpu := openGPU(b)
	for _, size := range []int64{512, 4 << 10, 64 << 10, 1 << 20, 2 << 20, 16 << 20, 256 << 20, 1 << 30} {
		b.Run("size="+strings.ReplaceAll(gpualloc.FormatSize(size), " ", ""), func(b *testing.B) {
			if free, _ := gpu.MemInfo(); free < size {
				b.Skipf("%s free on the device", gpualloc.FormatSize(free))
			}
			var inMalloc, inFree time.Duration
			for b.Loop() {
				t0 := time.Now()
				a, err := gpu.Malloc(size)
				t1 := time.Now()
				if err != nil {
					b.Fatal(err)
				}
				if err := gpu.Free(a, size); err != nil {
					b.Fatal(err)
				}
				inMalloc += t1.Sub(t0)
				inFree += time.Since(t1)
			}
			b.ReportMetric(float64(inMalloc.Nanoseconds())/float64(b.N), "malloc-ns/op")
			b.ReportMetric(float64(inFree.Nanoseconds())/float64(b.N), "free-ns/op")
		})
	}
}

// An addressLog is a backend that notes the address of each allocation,
// in order.
type addressLog struct {
	gpualloc.Backend
	addrs []uint64
}

func (l *addressLog) Malloc(size int64) (uint64, error) {
	a, err := l.Backend.Malloc(size)
	if err == nil {
		l.addrs = append(l.addrs, a)
	}
	return a, err
}

// Close closes the backend it wraps.
func (l *addressLog) Close() error {
	if c, ok := l.Backend.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// A scripted device is the simulator's virtual device handing out, in
// order, the addresses that a GPU gave: a replay on it makes the decisions
// that depend on where allocations lie (the choice between free blocks of
// one size, taken by lowest address in best fit, BFC and PyTorch's pools)
// as the replay on the GPU made them.
type scripted struct {
	dev   *virtual.Device
	addrs []uint64
	real  map[uint64]uint64 // the GPU's address -> the device's
}

func (s *scripted) Malloc(size int64) (uint64, error) {
	a, err := s.dev.Malloc(size)
	if err != nil {
		return 0, err
	}
	if len(s.addrs) == 0 {
		return 0, errors.New("more allocations than the GPU made")
	}
	g := s.addrs[0]
	s.addrs = s.addrs[1:]
	s.real[g] = a
	return g, nil
}

func (s *scripted) Free(addr uint64, size int64) error {
	a, ok := s.real[addr]
	if !ok {
		return fmt.Errorf("free of %#x: not an allocation of the script: %w", addr, gpualloc.ErrInvalidFree)
	}
	delete(s.real, addr)
	return s.dev.Free(a, size)
}

func (s *scripted) MemInfo() (free, total int64) { return s.dev.MemInfo() }

// TestGPUReplayEveryStrategy replays each bundled trace with every
// registered strategy, with its defaults, through the GPU (each device of
// the trace on a device of the machine), and then on the simulator's
// device of the GPU's size, handing out the addresses the GPU gave in the
// order it gave them. Every figure must agree: no strategy's decisions
// depend on timing, and none on the device's free memory until it is
// nearly full, which these traces are far from. It logs where the
// simulator's own addresses (ascending, while cuMemAlloc_v2 hands out
// mostly descending ones) lead a strategy to other choices.
func TestGPUReplayEveryStrategy(t *testing.T) {
	probe := openGPU(t)
	n, err := cuda.Devices()
	if err != nil {
		t.Fatal(err)
	}
	free0, total := probe.MemInfo()
	replayEveryStrategy(t, "cuda", traces.Bundled(), total, func(device int) (gpualloc.Backend, error) {
		return cuda.Open(cuda.Options{Device: device % n})
	})
	if free, _ := probe.MemInfo(); free < free0-64<<20 {
		t.Errorf("free device memory fell from %d to %d bytes over the replays: a leak?", free0, free)
	}
}

// replayEveryStrategy replays each of bundles with every registered
// strategy through the backends that open makes, of capacity bytes, and
// on the simulator's device of that size given the same addresses in the
// same order, and fails on every figure on which they differ.
func replayEveryStrategy(t *testing.T, backend string, bundles []traces.Bundle, capacity int64,
	open func(device int) (gpualloc.Backend, error)) {
	figures := []string{"peak reserved", "peak allocated", "device mallocs", "device frees",
		"device malloc bytes", "device maps", "device unmaps", "cache hits", "ooms"}
	for _, name := range gpualloc.Names() {
		params, err := gpualloc.Resolve(gpualloc.Spec{Name: name}, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, bt := range bundles {
			t.Run(name+"/"+bt.Name, func(t *testing.T) {
				logs := map[int]*addressLog{}
				replay := func(cfg sim.Config) sim.Result {
					r, err := bt.Open()
					if err != nil {
						t.Fatal(err)
					}
					cfg.Params, cfg.Capacity, cfg.SeriesBuckets = params, capacity, -1
					res, err := sim.Replay(r, cfg)
					if err != nil {
						t.Fatalf("Replay: %v", err)
					}
					return res
				}
				real := replay(sim.Config{Backend: backend, MeasureTime: true, NewBackend: func(device int) (gpualloc.Backend, error) {
					b, err := open(device)
					if err != nil {
						return nil, err
					}
					logs[device] = &addressLog{Backend: b}
					return logs[device], nil
				}})
				same := replay(sim.Config{NewBackend: func(device int) (gpualloc.Backend, error) {
					d, err := virtual.New(virtual.Options{Index: device, Capacity: capacity})
					if err != nil {
						return nil, err
					}
					return &scripted{dev: d, addrs: logs[device].addrs, real: map[uint64]uint64{}}, nil
				}})
				for _, d := range cuda.DiffFigures(real, same, figures...) {
					t.Error(d)
				}
				if d := cuda.DiffFigures(real, replay(sim.Config{}), figures...); len(d) > 0 {
					t.Logf("with the simulator's own addresses: %s", strings.Join(d, "; "))
				}
				t.Logf("%d events, %d device mallocs, peak reserved %s, %.3f ms in device calls",
					real.Events, real.DeviceMallocs, gpualloc.FormatSize(real.PeakReservedBytes),
					float64(*real.DeviceCallNSTotal)/1e6)
			})
		}
	}
}
