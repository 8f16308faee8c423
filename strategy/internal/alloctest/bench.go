package alloctest

import (
	"testing"

	"github.com/gpualloc/gpualloc"
)

// The benchmark bodies call the pool through gpualloc.Allocator: one
// indirect call per Alloc and per Free, the same for every strategy.

// HitSizes are the request sizes of [AllocFree]'s benchmarks.
var HitSizes = [4]int64{1, 4097, 100000, 5000000}

// Warm allocates and frees a block of each of sizes, so that a pool that
// caches has a free block of each afterwards.
func Warm(b testing.TB, a gpualloc.Allocator, sizes []int64) {
	b.Helper()
	for _, s := range sizes {
		blk, err := a.Alloc(s)
		if err != nil {
			b.Fatal(err)
		}
		if err := a.Free(blk); err != nil {
			b.Fatal(err)
		}
	}
}

// AllocFree is the body of a BenchmarkAllocFree: an Alloc of each of sizes
// in turn and the Free of its block, as many times as b asks.
func AllocFree(b *testing.B, a gpualloc.Allocator, sizes [4]int64) {
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		blk, err := a.Alloc(sizes[i&3])
		if err != nil {
			b.Fatal(err)
		}
		if err := a.Free(blk); err != nil {
			b.Fatal(err)
		}
	}
}

// WorkingSet is the body of a BenchmarkWorkingSet: it keeps 256 blocks of
// mixed sizes, up to about 8 MiB, live, and replaces one each iteration (a
// Free and an Alloc), taking the ring's slots stride apart (1: the oldest
// block; an odd stride visits every slot, in a scattered order). For a
// [gpualloc.FreeSpaceReporter] it reports the free bytes at the end and
// the largest free block.
func WorkingSet(b *testing.B, a gpualloc.Allocator, stride int) {
	var sizes [1024]int64
	for i := range sizes {
		sizes[i] = int64(1+i*i*37%(8<<20)) + int64(i%7)*4096
	}
	var ring [256]gpualloc.Block
	var err error
	for i := range ring {
		if ring[i], err = a.Alloc(sizes[i]); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		slot := i * stride & 255
		if err := a.Free(ring[slot]); err != nil {
			b.Fatal(err)
		}
		if ring[slot], err = a.Alloc(sizes[i&1023]); err != nil {
			b.Fatal(err)
		}
	}
	if fs, ok := a.(gpualloc.FreeSpaceReporter); ok {
		largest, total := fs.FreeSpace()
		b.ReportMetric(float64(total), "free-B")
		b.ReportMetric(float64(largest), "largest-free-B")
	}
}

// BenchAllocFree is the body of the BenchmarkAllocFree of a pool that
// carves blocks out of device memory it keeps: on a pool of the default
// configuration on a device of 1 GiB, an Alloc served from a free block and
// the Free that gives it back, for the four sizes of [HitSizes] in turn,
// with a block of 1 byte kept live so that the device memory stays.
func (s Strategy[C, P]) BenchAllocFree(b *testing.B) {
	p := s.NewPool(b, 1<<30, s.Default)
	keep, err := p.Alloc(1)
	if err != nil {
		b.Fatal(err)
	}
	AllocFree(b, p, HitSizes)
	if err := p.Free(keep); err != nil {
		b.Fatal(err)
	}
}

// BenchWorkingSet is the body of the BenchmarkWorkingSet of a pool that
// merges free neighbours: [WorkingSet] with stride 97 on a pool of the
// default configuration on a device of 64 GiB, so that each Free lands
// among live and free neighbours in a scattered order.
func (s Strategy[C, P]) BenchWorkingSet(b *testing.B) {
	WorkingSet(b, s.NewPool(b, 64<<30, s.Default), 97)
}
