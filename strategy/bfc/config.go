package bfc

import (
	"fmt"
	"math"
	"math/bits"
	"strconv"

	"github.com/gpualloc/gpualloc/strategy/internal/param"
)

// The constants of TensorFlow's BFCAllocator (bfc_allocator.h).
const (
	// MinAllocationSize is kMinAllocationSize, 1 << kMinAllocationBits:
	// the smallest chunk, and the granularity of every chunk and region.
	MinAllocationSize = 1 << minAllocationBits
	// NumBins is kNumBins: bin b holds the free chunks of 256 << b bytes up
	// to twice that, and the last bin every larger chunk.
	NumBins = 21
	// GrowthStart is the first region size with allow_growth: "2MiB
	// smallest initial allocation, unless total memory available is less"
	// (the BFCAllocator constructor; TensorFlow 1.x started at 1 MiB).
	GrowthStart = 2 << 20
	// MaxInternalFragmentation is the split rule's default bound on the
	// bytes a chunk may waste, 128 MiB, used when FragmentationFraction is
	// 0 (TensorFlow's kMaxInternalFragmentation before the option existed).
	MaxInternalFragmentation = 128 << 20
	// BackpedalFactor is kBackpedalFactor, a float: when the device refuses
	// a region, Extend asks for RoundedBytes(bytes * 0.9) instead, in
	// single precision, while that is at least the request.
	BackpedalFactor float32 = 0.9

	minAllocationBits = 8
)

// RoundedBytes returns the size of the chunk a request of size bytes
// needs: size rounded up to a multiple of 256 bytes (BFCAllocator::
// RoundedBytes, which AllocateRawInternal applies to every request; a
// request of 0 bytes is refused before, so every chunk is at least 256
// bytes). It returns 0 for a size below 1 or one whose rounded size would
// not fit in an int64.
func RoundedBytes(size int64) int64 {
	if size < 1 || size > math.MaxInt64-(MinAllocationSize-1) {
		return 0
	}
	return (size + MinAllocationSize - 1) &^ (MinAllocationSize - 1)
}

// BinNumForSize returns the bin of a free chunk of size bytes, as
// BFCAllocator::BinNumForSize: min(kNumBins-1, floor(log2(max(size, 256)
// >> 8))). Bin 0 holds the chunks of less than 512 bytes; bin b, for b
// from 1 to 19, those of [256 << b, 512 << b) bytes; bin 20 every chunk of
// 256 MiB or more.
func BinNumForSize(size int64) int {
	v := uint64(max(size, MinAllocationSize)) >> minAllocationBits
	return min(NumBins-1, bits.Len64(v)-1)
}

// Config are the parameters of a BFC pool, named as TensorFlow and JAX
// name them.
type Config struct {
	// AllowGrowth makes the pool take regions that grow: the first of
	// min(2 MiB, the memory limit), each later one twice the previous (or
	// the request rounded up by doubling, if larger). Without it the first
	// region is the whole memory limit. TensorFlow's
	// GPUOptions.allow_growth (TF_FORCE_GPU_ALLOW_GROWTH); JAX's
	// preallocate (XLA_PYTHON_CLIENT_PREALLOCATE) is its opposite.
	AllowGrowth bool

	// MemoryFraction is the pool's memory limit as a fraction of the
	// device's total memory, in (0, 1]: TensorFlow's
	// per_process_gpu_memory_fraction, XLA's GpuAllocatorConfig
	// memory_fraction (XLA_CLIENT_MEM_FRACTION,
	// XLA_PYTHON_CLIENT_MEM_FRACTION). Ignored when MemoryLimit is set.
	MemoryFraction float64

	// MemoryLimit, if positive, is the memory limit in bytes, instead of
	// MemoryFraction of the device: the total_memory a BFCAllocator is
	// built with, as TensorFlow's logical device memory_limit sets it.
	MemoryLimit int64

	// GarbageCollection makes the pool, when it cannot grow, return its
	// entirely free regions to the device and try once more
	// (BFCAllocator::DeallocateFreeRegions). On in TensorFlow's GPU
	// allocator (TF_ENABLE_GPU_GARBAGE_COLLECTION), off in XLA's.
	GarbageCollection bool

	// FragmentationFraction, in [0, 1], bounds the bytes a chunk handed
	// out may waste: a free chunk larger than the request is split when it
	// is at least twice the request, or when the rest is at least
	// FragmentationFraction times the memory limit; 0 means 128 MiB.
	// BFCAllocator::Options::fragmentation_fraction (TensorFlow's
	// GPUOptions.experimental.internal_fragmentation_fraction).
	FragmentationFraction float64
}

// DefaultConfig returns the defaults this simulator chooses: growth on
// (TensorFlow's allow_growth, JAX with preallocation off), so that peak
// reserved memory measures the trace rather than the device; the whole
// device as the limit; garbage collection on and the 128 MiB split bound,
// as TensorFlow's GPU allocator has them. TensorFlow's own default is
// allow_growth off, with a limit of the device's free memory less a
// reserve; JAX's is allow_growth off with a limit of 75% of the device
// and garbage collection off:
//
//	Config{AllowGrowth: false, MemoryFraction: 0.75}
func DefaultConfig() Config {
	return Config{AllowGrowth: true, MemoryFraction: 1, GarbageCollection: true}
}

// validate reports the first parameter of c out of range.
func (c Config) validate() error {
	switch {
	case !(c.MemoryFraction > 0 && c.MemoryFraction <= 1):
		return param.Error(name, "memory_fraction", fmtFloat(c.MemoryFraction), "must be more than 0 and at most 1")
	case c.MemoryLimit < 0:
		return param.Error(name, "memory_limit", strconv.FormatInt(c.MemoryLimit, 10), "must not be negative")
	case !(c.FragmentationFraction >= 0 && c.FragmentationFraction <= 1):
		return param.Error(name, "fragmentation_fraction", fmtFloat(c.FragmentationFraction), "must be from 0 to 1")
	}
	return nil
}

// limit returns the memory limit of a pool of configuration c on a device
// of total bytes: MemoryLimit if set, else total * MemoryFraction truncated,
// as XLA's CreateBFCAllocator and TensorFlow's GPU device compute it.
func (c Config) limit(total int64) int64 {
	if c.MemoryLimit > 0 {
		return c.MemoryLimit
	}
	return int64(float64(total) * c.MemoryFraction)
}

// maxInternalFragmentation returns the split rule's bound for a memory
// limit of limit bytes, as the BFCAllocator constructor computes
// max_internal_fragmentation_bytes_.
func (c Config) maxInternalFragmentation(limit int64) int64 {
	if c.FragmentationFraction > 0 {
		return int64(c.FragmentationFraction * float64(limit))
	}
	return MaxInternalFragmentation
}

// spec returns the pool's full spec.
func (c Config) spec() string {
	return fmt.Sprintf("%s:allow_growth=%t,preallocate=%t,memory_fraction=%s,memory_limit=%d,garbage_collection=%t,fragmentation_fraction=%s",
		name, c.AllowGrowth, !c.AllowGrowth, fmtFloat(c.MemoryFraction), c.MemoryLimit, c.GarbageCollection, fmtFloat(c.FragmentationFraction))
}

func fmtFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }
