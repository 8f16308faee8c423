package cuda

import (
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gpualloc/gpualloc"
)

// costSizes are the sizes BenchmarkDeviceCalls measures cuMemAlloc_v2,
// cuMemFree_v2 and the host calls at: 4 KiB to 4 GiB, with PyTorch's 2 MiB
// small and 20 MiB large segments among them.
var costSizes = []int64{
	4 << 10, 64 << 10, 512 << 10, 1 << 20, 2 << 20, 8 << 20, 20 << 20,
	64 << 20, 256 << 20, 1 << 30, 4 << 30,
}

// sizeName is a size as a sub-benchmark's name: "size=2MiB".
func sizeName(size int64) string {
	return "size=" + strings.ReplaceAll(gpualloc.FormatSize(size), " ", "")
}

// openCost opens device 0 for a benchmark of the driver's calls, with its
// context current on the calling goroutine's thread until the benchmark
// ends, or skips where there is no GPU.
func openCost(b *testing.B) *Backend {
	b.Helper()
	be, err := Open(Options{})
	if errors.Is(err, ErrNoDriver) || errors.Is(err, ErrNoDevice) {
		b.Skipf("needs an NVIDIA GPU and driver: %v", err)
	}
	if err != nil {
		b.Fatal(err)
	}
	runtime.LockOSThread()
	if err := be.setCurrent(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		runtime.UnlockOSThread()
		if err := be.Close(); err != nil {
			b.Error(err)
		}
	})
	return be
}

// timed runs f and returns how long it took, failing the benchmark if the
// driver call it makes fails.
func timed(b *testing.B, d *driver, call string, f func() result) time.Duration {
	t0 := time.Now()
	r := f()
	dt := time.Since(t0)
	if err := d.check(call, r); err != nil {
		b.Fatal(err)
	}
	return dt
}

// BenchmarkDeviceCalls measures, on an idle device, the driver calls that
// the backends make for a strategy, each timed on its own and reported as
// CALL-ns (nanoseconds a call, the wall clock of the calling thread):
//
//   - Malloc: cuMemAlloc_v2 and cuMemFree_v2 of one allocation, by size;
//   - Virtual: cuMemAddressReserve, cuMemCreate, cuMemMap, cuMemSetAccess,
//     cuMemUnmap, cuMemRelease and cuMemAddressFree of one range and one
//     piece of physical memory, by size (a whole number of 2 MiB pages);
//   - Host: cuMemAllocHost_v2 and cuMemFreeHost of page-locked host memory,
//     by size;
//   - MemInfo: cuMemGetInfo_v2.
//
// A size that the device (or the host) has no room for is skipped.
//
//	go test ./backend/cuda -run '^$' -bench DeviceCalls -benchtime 0.5s
func BenchmarkDeviceCalls(b *testing.B) {
	be := openCost(b)
	d := be.drv

	b.Run("Malloc", func(b *testing.B) {
		for _, size := range costSizes {
			b.Run(sizeName(size), func(b *testing.B) {
				be := openCost(b)
				if free, _, err := be.memInfo(); err != nil || free < size+size/8 {
					b.Skipf("%d bytes free on the device", free)
				}
				var inAlloc, inFree time.Duration
				for b.Loop() {
					var p uint64
					inAlloc += timed(b, d, fnMemAlloc, func() result { return d.memAlloc(&p, uintptr(size)) })
					inFree += timed(b, d, fnMemFree, func() result { return d.memFree(p) })
				}
				b.ReportMetric(float64(inAlloc.Nanoseconds())/float64(b.N), "cuMemAlloc-ns")
				b.ReportMetric(float64(inFree.Nanoseconds())/float64(b.N), "cuMemFree-ns")
				b.ReportMetric(0, "ns/op")
			})
		}
	})

	b.Run("Virtual", func(b *testing.B) {
		if d.vmmMissing() != nil {
			b.Skipf("the driver lacks %s", strings.Join(d.vmmMissing(), ", "))
		}
		prop := be.allocationProp()
		var gran uintptr
		if err := d.check(fnMemGetAllocationGranularity, d.memGetAllocationGranularity(&gran, &prop, memAllocGranularityMinimum)); err != nil {
			b.Fatal(err)
		}
		b.Logf("granularity %d bytes", gran)
		for _, size := range []int64{2 << 20, 20 << 20, 256 << 20, 1 << 30} {
			if size%int64(gran) != 0 {
				continue
			}
			b.Run(sizeName(size), func(b *testing.B) {
				be := openCost(b)
				if free, _, err := be.memInfo(); err != nil || free < size+size/8 {
					b.Skipf("%d bytes free on the device", free)
				}
				desc := memAccessDesc{
					location: memLocation{typ: memLocationTypeDevice, id: int32(be.ordinal)},
					flags:    memAccessFlagsProtReadWrite,
				}
				n := uintptr(size)
				var reserve, create, mmap, access, unmap, release, addrFree time.Duration
				for b.Loop() {
					var addr, h uint64
					reserve += timed(b, d, fnMemAddressReserve, func() result { return d.memAddressReserve(&addr, n, 0, 0, 0) })
					create += timed(b, d, fnMemCreate, func() result { return d.memCreate(&h, n, &prop, 0) })
					mmap += timed(b, d, fnMemMap, func() result { return d.memMap(addr, n, 0, h, 0) })
					access += timed(b, d, fnMemSetAccess, func() result { return d.memSetAccess(addr, n, &desc, 1) })
					unmap += timed(b, d, fnMemUnmap, func() result { return d.memUnmap(addr, n) })
					release += timed(b, d, fnMemRelease, func() result { return d.memRelease(h) })
					addrFree += timed(b, d, fnMemAddressFree, func() result { return d.memAddressFree(addr, n) })
				}
				for _, m := range []struct {
					call string
					t    time.Duration
				}{
					{"cuMemAddressReserve", reserve}, {"cuMemCreate", create}, {"cuMemMap", mmap},
					{"cuMemSetAccess", access}, {"cuMemUnmap", unmap}, {"cuMemRelease", release},
					{"cuMemAddressFree", addrFree},
				} {
					b.ReportMetric(float64(m.t.Nanoseconds())/float64(b.N), m.call+"-ns")
				}
				b.ReportMetric(0, "ns/op")
			})
		}
	})

	b.Run("Host", func(b *testing.B) {
		if d.memAllocHost == nil {
			b.Skipf("the driver lacks %s", fnMemAllocHost)
		}
		for _, size := range costSizes {
			b.Run(sizeName(size), func(b *testing.B) {
				openCost(b)
				var inAlloc, inFree time.Duration
				for b.Loop() {
					var p uintptr
					t0 := time.Now()
					r := d.memAllocHost(&p, uintptr(size))
					dt := time.Since(t0)
					if r == errOutOfMemory {
						b.Skipf("%s of %d bytes: out of memory", fnMemAllocHost, size)
					}
					if err := d.check(fnMemAllocHost, r); err != nil {
						b.Fatal(err)
					}
					inAlloc += dt
					inFree += timed(b, d, fnMemFreeHost, func() result { return d.memFreeHost(p) })
				}
				b.ReportMetric(float64(inAlloc.Nanoseconds())/float64(b.N), "cuMemAllocHost-ns")
				b.ReportMetric(float64(inFree.Nanoseconds())/float64(b.N), "cuMemFreeHost-ns")
				b.ReportMetric(0, "ns/op")
			})
		}
	})

	b.Run("MemInfo", func(b *testing.B) {
		openCost(b)
		var in time.Duration
		for b.Loop() {
			var f, t uintptr
			in += timed(b, d, fnMemGetInfo, func() result { return d.memGetInfo(&f, &t) })
		}
		b.ReportMetric(float64(in.Nanoseconds())/float64(b.N), "cuMemGetInfo-ns")
		b.ReportMetric(0, "ns/op")
	})
}
