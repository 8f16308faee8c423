package cuda

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"unsafe"

	"github.com/gpualloc/gpualloc"
	_ "github.com/gpualloc/gpualloc/strategy/all"
	"github.com/gpualloc/gpualloc/traces"
)

// TestStructLayout checks the Go structs against cuda.h's layout on 64-bit
// platforms.
func TestStructLayout(t *testing.T) {
	var p memAllocationProp
	var a memAccessDesc
	for _, c := range []struct {
		name      string
		got, want uintptr
	}{
		{"sizeof(CUmemLocation)", unsafe.Sizeof(memLocation{}), 8},
		{"CUmemLocation.id", unsafe.Offsetof(memLocation{}.id), 4},
		{"sizeof(CUmemAllocationProp)", unsafe.Sizeof(p), 32},
		{"CUmemAllocationProp.requestedHandleTypes", unsafe.Offsetof(p.requestedHandleTypes), 4},
		{"CUmemAllocationProp.location", unsafe.Offsetof(p.location), 8},
		{"CUmemAllocationProp.win32HandleMetaData", unsafe.Offsetof(p.win32HandleMetaData), 16},
		{"CUmemAllocationProp.allocFlags.compressionType", unsafe.Offsetof(p.compressionType), 24},
		{"CUmemAllocationProp.allocFlags.gpuDirectRDMACapable", unsafe.Offsetof(p.gpuDirectRDMACapable), 25},
		{"CUmemAllocationProp.allocFlags.usage", unsafe.Offsetof(p.usage), 26},
		{"CUmemAllocationProp.allocFlags.reserved", unsafe.Offsetof(p.reserved), 28},
		{"sizeof(CUmemAccessDesc)", unsafe.Sizeof(a), 12},
		{"CUmemAccessDesc.flags", unsafe.Offsetof(a.flags), 8},
	} {
		if c.got != c.want {
			t.Errorf("%s: %d, want %d", c.name, c.got, c.want)
		}
	}
}

func openVirtual(t *testing.T, f *fakeGPU) (*Backend, *VirtualBackend) {
	t.Helper()
	b := openFake(t, f)
	v, err := b.Virtual()
	if err != nil {
		b.Close()
		t.Fatalf("Virtual: %v", err)
	}
	return b, v
}

// TestVirtualUnavailable checks each reason a backend has no virtual
// memory, and that a plain Backend is no gpualloc.VirtualMemory.
func TestVirtualUnavailable(t *testing.T) {
	var plain any = &Backend{}
	if _, ok := plain.(gpualloc.VirtualMemory); ok {
		t.Error("a *Backend is a gpualloc.VirtualMemory")
	}
	var virt any = &VirtualBackend{}
	if _, ok := virt.(gpualloc.VirtualMemory); !ok {
		t.Error("a *VirtualBackend is no gpualloc.VirtualMemory")
	}
	for _, c := range []struct {
		name  string
		setup func(f *fakeGPU, d *driver)
		noVM  bool // wraps ErrNoVirtualMemory
		code  int  // of the *Error it wraps, 0 for none
		msg   string
	}{
		{"driver without the functions", func(f *fakeGPU, d *driver) { f.noVMM = true }, true, 0,
			"cuda: device 0: no virtual memory management (libfakecuda.so lacks cuDeviceGetAttribute, cuMemGetAllocationGranularity, " +
				"cuMemAddressReserve, cuMemAddressFree, cuMemCreate, cuMemRelease, cuMemMap, cuMemSetAccess, cuMemUnmap)"},
		{"driver without one of them", func(f *fakeGPU, d *driver) { d.memSetAccess = nil }, true, 0,
			"cuda: device 0: no virtual memory management (libfakecuda.so lacks cuMemSetAccess)"},
		{"device without support", func(f *fakeGPU, d *driver) { f.vmmAttr = 0 }, true, 0,
			"cuda: device 0: no virtual memory management (the device does not support it)"},
		{"attribute query fails", func(f *fakeGPU, d *driver) { f.attrRC = 700 }, false, 700,
			"cuda: device 0: virtual memory: cuDeviceGetAttribute: CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered"},
		{"granularity query fails", func(f *fakeGPU, d *driver) { f.granRC = errInvalidValue }, false, 1,
			"cuda: device 0: virtual memory: cuMemGetAllocationGranularity: CUDA_ERROR_INVALID_VALUE: invalid argument"},
		{"granularity not a power of two", func(f *fakeGPU, d *driver) { f.gran = 3 * MiB }, true, 0,
			"cuda: device 0: no virtual memory management (granularity 3145728, not a power of two)"},
		{"context fails", func(f *fakeGPU, d *driver) { f.setRC = 201 }, false, 201,
			"cuda: device 0: virtual memory: cuCtxSetCurrent: CUDA_ERROR_INVALID_CONTEXT: invalid device context"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFakeGPU(GiB)
			d := f.driver()
			b, err := open(d, Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			c.setup(f, d)
			if f.noVMM {
				d = f.driver()
				b.drv = d
			}
			v, err := b.Virtual()
			if err == nil {
				t.Fatalf("Virtual() = %v, want an error", v)
			}
			if err.Error() != c.msg {
				t.Errorf("error:\n got %s\nwant %s", err, c.msg)
			}
			if errors.Is(err, ErrNoVirtualMemory) != c.noVM {
				t.Errorf("errors.Is(err, ErrNoVirtualMemory) = %v, want %v", !c.noVM, c.noVM)
			}
			var ce *Error
			if got := errors.As(err, &ce); got != (c.code != 0) || got && ce.Code != c.code {
				t.Errorf("error wraps %#v, want a *cuda.Error of code %d", ce, c.code)
			}
		})
	}
	f := newFakeGPU(GiB)
	b := openFake(t, f)
	b.Close()
	if _, err := b.Virtual(); !errors.Is(err, ErrClosed) {
		t.Errorf("Virtual after Close = %v, want an error wrapping ErrClosed", err)
	}
}

// TestVirtualMemory runs each call on the fake driver and checks what it
// was asked, the structs included, and what it holds.
func TestVirtualMemory(t *testing.T) {
	f := newFakeGPU(GiB)
	f.count = 2
	b, err := open(f.driver(), Options{Device: 1})
	if err != nil {
		t.Fatal(err)
	}
	v, err := b.Virtual()
	if err != nil {
		t.Fatal(err)
	}
	var vm gpualloc.VirtualMemory = v
	if g := vm.Granularity(); g != 2*MiB {
		t.Errorf("Granularity() = %d, want %d", g, 2*MiB)
	}
	if v2, err := b.Virtual(); err != nil || v2.Backend != b {
		t.Errorf("second Virtual() = %v, %v", v2, err)
	}
	if n := f.callCount(fnMemGetAllocationGranularity); n != 1 {
		t.Errorf("the granularity was asked %d times, want once", n)
	}
	f.forgetContexts(true)
	r1, err := vm.Reserve(8 * MiB)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := vm.Reserve(4 * MiB)
	if err != nil {
		t.Fatal(err)
	}
	if f.ranges[r1] != 8*MiB || f.ranges[r2] != 4*MiB {
		t.Fatalf("the driver holds ranges %v", f.ranges)
	}
	f.forgetContexts(true)
	h1, err := vm.Create(4 * MiB)
	if err != nil {
		t.Fatal(err)
	}
	want := memAllocationProp{typ: 1, location: memLocation{typ: 1, id: 1}}
	if f.lastProp != want {
		t.Errorf("cuMemCreate's CUmemAllocationProp = %+v, want %+v", f.lastProp, want)
	}
	h2, err := vm.Create(2 * MiB)
	if err != nil {
		t.Fatal(err)
	}
	if free, total := b.MemInfo(); free != GiB-6*MiB || total != GiB {
		t.Errorf("MemInfo() = %d, %d; physical memory counts", free, total)
	}
	f.forgetContexts(true)
	// The same memory at two addresses, and another after it.
	for _, m := range []struct {
		addr uint64
		h    uint64
	}{{r1, h1}, {r1 + 4*MiB, h2}, {r2, h1}} {
		if err := vm.Map(m.addr, m.h); err != nil {
			t.Fatalf("Map(%#x, %d): %v", m.addr, m.h, err)
		}
		fm := f.mappings[m.addr]
		if !fm.access {
			t.Errorf("mapping at %#x without access", m.addr)
		}
	}
	wantAccess := memAccessDesc{location: memLocation{typ: 1, id: 1}, flags: 3}
	if f.lastAccess != wantAccess {
		t.Errorf("cuMemSetAccess's CUmemAccessDesc = %+v, want %+v", f.lastAccess, wantAccess)
	}
	if ranges, handles, bytes, mappings := v.VirtualInUse(); ranges != 2 || handles != 2 || bytes != 6*MiB || mappings != 3 {
		t.Errorf("VirtualInUse() = %d, %d, %d, %d", ranges, handles, bytes, mappings)
	}
	f.forgetContexts(true)
	for _, m := range []struct {
		addr uint64
		size int64
	}{{r2, 4 * MiB}, {r1 + 4*MiB, 2 * MiB}, {r1, 4 * MiB}} {
		if err := vm.Unmap(m.addr, m.size); err != nil {
			t.Fatalf("Unmap(%#x, %d): %v", m.addr, m.size, err)
		}
	}
	for _, h := range []uint64{h1, h2} {
		if err := vm.Release(h); err != nil {
			t.Fatalf("Release(%d): %v", h, err)
		}
	}
	if err := vm.Unreserve(r1, 8*MiB); err != nil {
		t.Fatal(err)
	}
	if err := vm.Unreserve(r2, 4*MiB); err != nil {
		t.Fatal(err)
	}
	if len(f.ranges)+len(f.phys)+len(f.mappings) != 0 || f.used != 0 {
		t.Errorf("the driver still holds %d ranges, %d handles, %d mappings, %d bytes", len(f.ranges), len(f.phys), len(f.mappings), f.used)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestVirtualRules checks that calls that break gpualloc.VirtualMemory's
// rules fail without calling the driver and change nothing, on a range of
// 4 pages with 2 pages mapped at its start and 1 page not mapped.
func TestVirtualRules(t *testing.T) {
	const g = 2 * MiB
	type state struct {
		v     *VirtualBackend
		base  uint64
		h, h2 uint64
	}
	for _, c := range []struct {
		name string
		call func(s *state) error
		want error
	}{
		{"reserve of 0 bytes", func(s *state) error { _, err := s.v.Reserve(0); return err }, gpualloc.ErrInvalidSize},
		{"reserve of part of a page", func(s *state) error { _, err := s.v.Reserve(g + 1); return err }, gpualloc.ErrInvalidSize},
		{"create of part of a page", func(s *state) error { _, err := s.v.Create(g / 2); return err }, gpualloc.ErrInvalidSize},
		{"create of a negative size", func(s *state) error { _, err := s.v.Create(-g); return err }, gpualloc.ErrInvalidSize},
		{"map over a mapping", func(s *state) error { return s.v.Map(s.base+g, s.h2) }, gpualloc.ErrInvalidFree},
		{"map past the range's end", func(s *state) error { return s.v.Map(s.base+3*g, s.h) }, gpualloc.ErrInvalidFree},
		{"map outside every range", func(s *state) error { return s.v.Map(s.base+16*g, s.h2) }, gpualloc.ErrInvalidFree},
		{"map not aligned", func(s *state) error { return s.v.Map(s.base+2*g+512, s.h2) }, gpualloc.ErrInvalidFree},
		{"map of no memory", func(s *state) error { return s.v.Map(s.base+2*g, 99) }, gpualloc.ErrInvalidFree},
		{"unmap where nothing is mapped", func(s *state) error { return s.v.Unmap(s.base+2*g, g) }, gpualloc.ErrInvalidFree},
		{"unmap inside a mapping", func(s *state) error { return s.v.Unmap(s.base+g, g) }, gpualloc.ErrInvalidFree},
		{"unmap with the wrong size", func(s *state) error { return s.v.Unmap(s.base, g) }, gpualloc.ErrInvalidFree},
		{"release of mapped memory", func(s *state) error { return s.v.Release(s.h) }, gpualloc.ErrInvalidFree},
		{"release of no memory", func(s *state) error { return s.v.Release(99) }, gpualloc.ErrInvalidFree},
		{"unreserve with a mapping", func(s *state) error { return s.v.Unreserve(s.base, 4*g) }, gpualloc.ErrInvalidFree},
		{"unreserve of part of a range", func(s *state) error { return s.v.Unreserve(s.base, 2*g) }, gpualloc.ErrInvalidFree},
		{"unreserve of no range", func(s *state) error { return s.v.Unreserve(s.base+16*g, g) }, gpualloc.ErrInvalidFree},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFakeGPU(GiB)
			b, v := openVirtual(t, f)
			defer b.Close()
			s := &state{v: v}
			var err error
			if s.base, err = v.Reserve(4 * g); err != nil {
				t.Fatal(err)
			}
			if s.h, err = v.Create(2 * g); err != nil {
				t.Fatal(err)
			}
			if s.h2, err = v.Create(g); err != nil {
				t.Fatal(err)
			}
			if err := v.Map(s.base, s.h); err != nil {
				t.Fatal(err)
			}
			calls := fmt.Sprint(f.calls)
			r0, h0, b0, m0 := v.VirtualInUse()
			err = c.call(s)
			if !errors.Is(err, c.want) {
				t.Fatalf("error %v, want one wrapping %v", err, c.want)
			}
			if !strings.HasPrefix(err.Error(), "cuda: device 0: ") || strings.Contains(err.Error(), "\n") {
				t.Errorf("error %q is not one line naming the device", err)
			}
			if got := fmt.Sprint(f.calls); got != calls {
				t.Errorf("the call reached the driver: calls %s, were %s", got, calls)
			}
			if r, h, bytes, m := v.VirtualInUse(); r != r0 || h != h0 || bytes != b0 || m != m0 {
				t.Errorf("the books changed")
			}
		})
	}
}

// TestVirtualDriverFailures checks that a failing driver call is an
// *Error naming the call, out of memory wraps gpualloc.ErrOutOfMemory, and
// the books keep agreeing with the driver.
func TestVirtualDriverFailures(t *testing.T) {
	const g = 2 * MiB
	for _, c := range []struct {
		name   string
		inject func(f *fakeGPU)
		call   func(v *VirtualBackend, base, h, mapped uint64) error
		oom    bool
		msg    string
	}{
		{"create out of memory", nil,
			func(v *VirtualBackend, base, h, mapped uint64) error { _, err := v.Create(GiB); return err }, true,
			"cuda: device 0: create of 1073741824 bytes: cuMemCreate: CUDA_ERROR_OUT_OF_MEMORY: out of memory"},
		{"create fails", func(f *fakeGPU) { f.createRC = 700 },
			func(v *VirtualBackend, base, h, mapped uint64) error { _, err := v.Create(g); return err }, false,
			"cuda: device 0: create of 2097152 bytes: cuMemCreate: CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered"},
		{"reserve fails", func(f *fakeGPU) { f.reserveRC = errOutOfMemory },
			func(v *VirtualBackend, base, h, mapped uint64) error { _, err := v.Reserve(g); return err }, true,
			"cuda: device 0: reserve of 2097152 bytes: cuMemAddressReserve: CUDA_ERROR_OUT_OF_MEMORY: out of memory"},
		{"map fails", func(f *fakeGPU) { f.mapRC = errInvalidValue },
			func(v *VirtualBackend, base, h, mapped uint64) error { return v.Map(base+2*g, h) }, false,
			"cuda: device 0: map of handle 2 at %#x: cuMemMap: CUDA_ERROR_INVALID_VALUE: invalid argument"},
		{"set access fails: unmapped again", func(f *fakeGPU) { f.accessRC = 700 },
			func(v *VirtualBackend, base, h, mapped uint64) error { return v.Map(base+2*g, h) }, false,
			"cuda: device 0: map of handle 2 at %#x: cuMemSetAccess: CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered"},
		{"unmap fails: still mapped", func(f *fakeGPU) { f.unmapRC = 700 },
			func(v *VirtualBackend, base, h, mapped uint64) error { return v.Unmap(base, g) }, false,
			"cuda: device 0: unmap of %#x (2097152 bytes): cuMemUnmap: CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered"},
		{"release fails", func(f *fakeGPU) { f.releaseRC = 700 },
			func(v *VirtualBackend, base, h, mapped uint64) error { return v.Release(h) }, false,
			"cuda: device 0: release of handle 2: cuMemRelease: CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered"},
		{"unreserve fails", func(f *fakeGPU) { f.addrFreeRC = 700 },
			func(v *VirtualBackend, base, h, mapped uint64) error {
				r, err := v.Reserve(g)
				if err != nil {
					return err
				}
				return v.Unreserve(r, g)
			}, false,
			"cuda: device 0: unreserve of %#x (2097152 bytes): cuMemAddressFree: CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered"},
		{"context fails", func(f *fakeGPU) { f.setRC = 201 },
			func(v *VirtualBackend, base, h, mapped uint64) error { return v.Release(h) }, false,
			"cuda: device 0: release of handle 2: cuCtxSetCurrent: CUDA_ERROR_INVALID_CONTEXT: invalid device context"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFakeGPU(GiB)
			b, v := openVirtual(t, f)
			base, err := v.Reserve(4 * g)
			if err != nil {
				t.Fatal(err)
			}
			mapped, err := v.Create(g) // handle 1, mapped at base
			if err != nil {
				t.Fatal(err)
			}
			h, err := v.Create(g) // handle 2, not mapped
			if err != nil {
				t.Fatal(err)
			}
			if err := v.Map(base, mapped); err != nil {
				t.Fatal(err)
			}
			if c.inject != nil {
				c.inject(f)
			}
			err = c.call(v, base, h, mapped)
			msg := c.msg
			if strings.Contains(msg, "%#x") {
				addr := base
				if c.name == "map fails" || strings.HasPrefix(c.name, "set access") {
					addr = base + 2*g
				}
				if c.name == "unreserve fails" {
					addr = f.vnext - 2*g // the range just reserved, a page before vnext
				}
				msg = fmt.Sprintf(msg, addr)
			}
			if err == nil || err.Error() != msg {
				t.Errorf("error:\n got %v\nwant %s", err, msg)
			}
			if errors.Is(err, gpualloc.ErrOutOfMemory) != c.oom {
				t.Errorf("errors.Is(err, gpualloc.ErrOutOfMemory) = %v, want %v", !c.oom, c.oom)
			}
			var ce *Error
			if !errors.As(err, &ce) {
				t.Errorf("error does not wrap a *cuda.Error")
			}
			// The books agree with the driver.
			ranges, handles, bytes, mappings := v.VirtualInUse()
			if ranges != len(f.ranges) || handles != len(f.phys) || bytes != f.used || mappings != len(f.mappings) {
				t.Errorf("books: %d ranges, %d handles (%d bytes), %d mappings; driver: %d, %d (%d), %d",
					ranges, handles, bytes, mappings, len(f.ranges), len(f.phys), f.used, len(f.mappings))
			}
			if err := b.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			if len(f.ranges)+len(f.phys)+len(f.mappings) != 0 || f.used != 0 {
				t.Errorf("Close left %d ranges, %d handles, %d mappings, %d bytes", len(f.ranges), len(f.phys), len(f.mappings), f.used)
			}
		})
	}
}

// TestVirtualClose checks that Close gives back what is left, mappings
// first, and that every call fails afterwards without the driver.
func TestVirtualClose(t *testing.T) {
	const g = 2 * MiB
	f := newFakeGPU(GiB)
	_, v := openVirtual(t, f)
	r, err := v.Reserve(8 * g)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		h, err := v.Create(g)
		if err != nil {
			t.Fatal(err)
		}
		if i < 2 {
			if err := v.Map(r+uint64(i)*g, h); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := v.Reserve(g); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Malloc(MiB); err != nil {
		t.Fatal(err)
	}
	f.forgetContexts(true)
	if err := v.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if len(f.ranges)+len(f.phys)+len(f.mappings)+len(f.allocs) != 0 || f.used != 0 || f.retain != 0 {
		t.Errorf("Close left %d ranges, %d handles, %d mappings, %d allocations, %d bytes, retain %d",
			len(f.ranges), len(f.phys), len(f.mappings), len(f.allocs), f.used, f.retain)
	}
	if n := f.callCount(fnMemUnmap); n != 2 {
		t.Errorf("Close made %d unmaps, want 2", n)
	}
	calls := fmt.Sprint(f.calls)
	for name, call := range map[string]func() error{
		"Reserve":   func() error { _, err := v.Reserve(g); return err },
		"Unreserve": func() error { return v.Unreserve(r, 8*g) },
		"Create":    func() error { _, err := v.Create(g); return err },
		"Release":   func() error { return v.Release(1) },
		"Map":       func() error { return v.Map(r, 1) },
		"Unmap":     func() error { return v.Unmap(r, g) },
	} {
		if err := call(); !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close = %v, want an error wrapping ErrClosed", name, err)
		}
	}
	if got := fmt.Sprint(f.calls); got != calls {
		t.Errorf("calls after Close reached the driver")
	}
	if rr, h, bytes, m := v.VirtualInUse(); rr+h+m != 0 || bytes != 0 {
		t.Errorf("VirtualInUse() after Close = %d, %d, %d, %d", rr, h, bytes, m)
	}
}

// TestVirtualCloseFailures checks that Close goes on after a failure and
// reports it.
func TestVirtualCloseFailures(t *testing.T) {
	const g = 2 * MiB
	f := newFakeGPU(GiB)
	b, v := openVirtual(t, f)
	r, err := v.Reserve(2 * g)
	if err != nil {
		t.Fatal(err)
	}
	h, err := v.Create(g)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Map(r, h); err != nil {
		t.Fatal(err)
	}
	f.unmapRC = 700
	err = b.Close()
	want := fmt.Sprintf("cuda: device 0: close: unmap of %#x (2097152 bytes): cuMemUnmap: CUDA_ERROR_ILLEGAL_ADDRESS: "+
		"an illegal memory access was encountered (and 2 more failures)", r)
	if err == nil || err.Error() != want {
		t.Errorf("Close:\n got %v\nwant %s", err, want)
	}
	if f.retain != 0 {
		t.Errorf("the primary context is still retained after Close")
	}
}

// TestVirtualReplay replays a bundled trace with the strategies that use
// virtual memory on the fake driver, through the backend, and on the
// simulator's device: the figures are the same.
func TestVirtualReplay(t *testing.T) {
	bt, ok := traces.LookupBundled("transformer-cpu")
	if !ok {
		t.Fatal("no bundled trace transformer-cpu")
	}
	for _, spec := range []string{"pytorch:expandable_segments=true", "gmlake"} {
		t.Run(spec, func(t *testing.T) {
			var f *fakeGPU
			s, c := ReplayBoth(t, bt, spec, 80*GiB, 80*GiB, func(int) (gpualloc.Backend, error) {
				f = newFakeGPU(80 * GiB)
				b, err := open(f.driver(), Options{})
				if err != nil {
					return nil, err
				}
				return b.Virtual()
			})
			if c.DeviceMaps == 0 || c.DeviceMaps != s.DeviceMaps || c.DeviceUnmaps != s.DeviceUnmaps {
				t.Errorf("maps and unmaps: %d, %d through the backend, %d, %d on the simulator", c.DeviceMaps, c.DeviceUnmaps, s.DeviceMaps, s.DeviceUnmaps)
			}
			for _, d := range DiffFigures(c, s, "peak reserved", "peak allocated", "device mallocs", "device frees",
				"device malloc bytes", "cache hits", "ooms") {
				t.Error(d)
			}
			if len(f.ranges)+len(f.phys)+len(f.mappings)+len(f.allocs) != 0 || f.retain != 0 {
				t.Errorf("after the replay the driver holds %d ranges, %d handles, %d mappings, %d allocations",
					len(f.ranges), len(f.phys), len(f.mappings), len(f.allocs))
			}
		})
	}
}
