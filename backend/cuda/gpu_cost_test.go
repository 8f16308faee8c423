package cuda

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/devicecost"
)

// costSizes are the sizes BenchmarkDeviceCalls measures cuMemAlloc_v2 and
// cuMemFree_v2 at: powers of two from 4 KiB to 4 GiB (every other one below
// 1 MiB), the knots of package devicecost's model, which is linear between
// powers of two. vmmSizes are those of the virtual memory calls, whole
// numbers of 2 MiB pages; hostSizes those of the host calls, fewer, since
// pinning is slow.
var (
	costSizes = []int64{
		4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 2 << 20, 4 << 20, 8 << 20, 16 << 20, 32 << 20,
		64 << 20, 128 << 20, 256 << 20, 512 << 20, 1 << 30, 2 << 30, 4 << 30,
	}
	vmmSizes = []int64{
		2 << 20, 4 << 20, 8 << 20, 16 << 20, 32 << 20, 64 << 20, 128 << 20, 256 << 20, 512 << 20,
		1 << 30, 2 << 30, 4 << 30,
	}
	hostSizes = []int64{4 << 10, 64 << 10, 1 << 20, 2 << 20, 16 << 20, 256 << 20, 1 << 30, 4 << 30}
)

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

// batch is how many allocations of size bytes BenchmarkDeviceCalls holds
// at once: 8 GiB of them, from 1 to 256.
func batch(size int64) int { return int(min(256, max(1, (8<<30)/size))) }

// settle is how long BenchmarkDeviceCalls waits after freeing a batch: the
// driver clears freed device memory in the background, and an allocation
// made meanwhile waits for it (1 GiB freed and allocated again at once
// takes 2 ms, against 0.1 ms once the memory is clear).
const settle = 100 * time.Millisecond

// BenchmarkDeviceCalls measures, on an idle device, the driver calls that
// the backends make for a strategy, each timed on its own and reported as
// CALL-ns (nanoseconds a call, the wall clock of the calling thread):
//
//   - Malloc: cuMemAlloc_v2 and cuMemFree_v2, by size;
//   - Virtual: cuMemAddressReserve and cuMemAddressFree of a range, and
//     cuMemCreate, cuMemMap, cuMemSetAccess, cuMemUnmap and cuMemRelease of
//     pieces of physical memory in it, by the size of a piece (a whole
//     number of 2 MiB pages);
//   - Host: cuMemAllocHost_v2 and cuMemFreeHost of page-locked host memory,
//     by size;
//   - MemInfo: cuMemGetInfo_v2.
//
// Allocations are made as a pool grows and then gives its memory back: an
// iteration allocates a batch of them (8 GiB, at most 256), all live
// together, and then frees them all. A single allocation freed at once
// costs the driver more than one among others (a small one empties its
// 2 MiB page, and the page goes back with it), and freed memory costs more
// to allocate again than memory never used, which is why
// cuMemAlloc-first-ns, the first batch alone, is reported apart. After
// each batch the benchmark waits for the driver to clear what was freed
// (settle), as a replay's strategy, which frees rarely, finds it. A size
// that the device (or the host) has no room for is skipped.
//
// With GPUALLOC_DEVICE_COSTS=FILE it also writes the device calls' costs to
// FILE as a table of package devicecost, which simulate's --device-costs
// reads:
//
//	GPUALLOC_DEVICE_COSTS=mygpu.csv go test ./backend/cuda -run '^$' -bench DeviceCalls -benchtime 0.5s
func BenchmarkDeviceCalls(b *testing.B) {
	be := openCost(b)
	d := be.drv
	var table strings.Builder
	fmt.Fprintf(&table, "# gpu: %s\n# go test ./backend/cuda -run '^$' -bench DeviceCalls\n%s\n", be.Name(), devicecost.Header)
	// report reports the mean time of call over calls calls of size
	// bytes, and notes it in the table.
	type key struct {
		call string
		size int64
	}
	noted := map[key]bool{}
	report := func(b *testing.B, call string, size int64, t time.Duration, calls int) {
		ns := float64(t.Nanoseconds()) / float64(calls)
		b.ReportMetric(ns, call+"-ns")
		if !noted[key{call, size}] { // ranges of one span: the first
			noted[key{call, size}] = true
			fmt.Fprintf(&table, "%s,%d,%.0f\n", call, size, ns)
		}
	}
	if path := os.Getenv("GPUALLOC_DEVICE_COSTS"); path != "" {
		b.Cleanup(func() {
			if err := os.WriteFile(path, []byte(table.String()), 0o644); err != nil {
				b.Error(err)
			}
		})
	}

	b.Run("Malloc", func(b *testing.B) {
		for _, size := range costSizes {
			b.Run(sizeName(size), func(b *testing.B) {
				be := openCost(b)
				n := batch(size)
				if free, _, err := be.memInfo(); err != nil || free < int64(n)*size+(1<<30) {
					b.Skipf("%d bytes free on the device", free)
				}
				p := make([]uint64, n)
				var inAlloc, inFree, first time.Duration
				for b.Loop() {
					for i := range p {
						inAlloc += timed(b, d, fnMemAlloc, func() result { return d.memAlloc(&p[i], uintptr(size)) })
					}
					if first == 0 {
						first = inAlloc
					}
					for i := range p {
						inFree += timed(b, d, fnMemFree, func() result { return d.memFree(p[i]) })
					}
					time.Sleep(settle)
				}
				report(b, "cuMemAlloc", size, inAlloc, b.N*n)
				report(b, "cuMemFree", size, inFree, b.N*n)
				b.ReportMetric(float64(first.Nanoseconds())/float64(n), "cuMemAlloc-first-ns")
				b.ReportMetric(float64(n), "batch")
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
		for _, size := range vmmSizes {
			if size%int64(gran) != 0 {
				continue
			}
			b.Run(sizeName(size), func(b *testing.B) {
				be := openCost(b)
				n := batch(size)
				if free, _, err := be.memInfo(); err != nil || free < int64(n)*size+(1<<30) {
					b.Skipf("%d bytes free on the device", free)
				}
				desc := memAccessDesc{
					location: memLocation{typ: memLocationTypeDevice, id: int32(be.ordinal)},
					flags:    memAccessFlagsProtReadWrite,
				}
				span, piece := uintptr(n)*uintptr(size), uintptr(size)
				h := make([]uint64, n)
				var reserve, create, mmap, access, unmap, release, addrFree time.Duration
				for b.Loop() {
					var base uint64
					reserve += timed(b, d, fnMemAddressReserve, func() result { return d.memAddressReserve(&base, span, 0, 0, 0) })
					for i := range h {
						addr := base + uint64(i)*uint64(piece)
						create += timed(b, d, fnMemCreate, func() result { return d.memCreate(&h[i], piece, &prop, 0) })
						mmap += timed(b, d, fnMemMap, func() result { return d.memMap(addr, piece, 0, h[i], 0) })
						access += timed(b, d, fnMemSetAccess, func() result { return d.memSetAccess(addr, piece, &desc, 1) })
					}
					for i := range h {
						addr := base + uint64(i)*uint64(piece)
						unmap += timed(b, d, fnMemUnmap, func() result { return d.memUnmap(addr, piece) })
						release += timed(b, d, fnMemRelease, func() result { return d.memRelease(h[i]) })
					}
					addrFree += timed(b, d, fnMemAddressFree, func() result { return d.memAddressFree(base, span) })
					time.Sleep(settle)
				}
				for _, m := range []struct {
					call  string
					t     time.Duration
					size  int64
					calls int
				}{
					{"cuMemAddressReserve", reserve, int64(span), b.N}, {"cuMemCreate", create, size, b.N * n},
					{"cuMemMap", mmap, size, b.N * n}, {"cuMemSetAccess", access, size, b.N * n},
					{"cuMemUnmap", unmap, size, b.N * n}, {"cuMemRelease", release, size, b.N * n},
					{"cuMemAddressFree", addrFree, int64(span), b.N},
				} {
					report(b, m.call, m.size, m.t, m.calls)
				}
				b.ReportMetric(float64(n), "batch")
				b.ReportMetric(0, "ns/op")
			})
		}
	})

	b.Run("Host", func(b *testing.B) {
		if d.memAllocHost == nil {
			b.Skipf("the driver lacks %s", fnMemAllocHost)
		}
		for _, size := range hostSizes {
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
