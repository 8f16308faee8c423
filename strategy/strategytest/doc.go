// Package strategytest checks that an allocation strategy behaves as a
// [gpualloc.Allocator] must, the way testing/fstest checks an fs.FS.
//
// [Check] opens the allocator on a checking virtual device ([NewDevice])
// once per check and drives it: blocks of every size from one byte to tens
// of MiB, frees in every order, invalid calls, running out of memory,
// releasing the cache, and long random traces. After every operation it
// checks that blocks never overlap, lie inside memory the allocator holds
// from the device and are aligned, that the free space a
// [gpualloc.FreeSpaceReporter] reports lies in the rest of that memory,
// that the allocator's [gpualloc.Stats] add up exactly against the blocks
// and the device, and that the device was never misused. A failure names
// the check, the operation and the numbers that do not add up.
// Check returns every failure in one error, as testing/fstest.TestFS does,
// so that it can run anywhere: in a main, a fuzz target, another test
// framework. [Run] runs the same checks as subtests of a [testing.T].
//
// Every strategy in this module runs the suite in its tests, and a strategy
// written elsewhere can run it too:
//
//	func TestConformance(t *testing.T) {
//		strategytest.Run(t, func(b gpualloc.Backend) (gpualloc.Allocator, error) {
//			return mypool.New(b, mypool.DefaultConfig())
//		}, &strategytest.Options{Caching: true})
//	}
//
// The device, a [virtual.Device] that reuses freed addresses first fit, is
// also useful on its own, in a strategy's tests, examples and benchmarks:
// [NewDevice] makes one. It counts mallocs, frees and bytes, reports what it
// holds, and can be told to refuse mallocs to reach an allocator's retry
// path.
package strategytest
