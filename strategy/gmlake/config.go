package gmlake

import (
	"fmt"
	"math"
	"strconv"

	"github.com/gpualloc/gpualloc/internal/torchsize"
	"github.com/gpualloc/gpualloc/strategy/internal/param"
)

// GMLake's constants (GMLake/src/CUDACachingAllocator.cpp in glake): those
// of PyTorch's caching allocator (package torchsize) with kGranularity added.
const (
	// ChunkSize is kGranularity: the physical chunk of GMLake's virtual
	// memory, the unit of its pBlocks and of stitching, and the rounding of
	// large requests.
	ChunkSize = 2 << 20
	mib       = 1 << 20
	gib       = 1 << 30
)

// Config are GMLake's settings, which glake reads from environment
// variables (fragLimit, reuseLimit, defragLevel, autoGC).
type Config struct {
	// FragLimit is fragLimit: only requests whose rounded size is at least
	// this many bytes are stitched; smaller ones are served as PyTorch
	// serves them. Default 512 MiB. Must not be negative.
	FragLimit int64

	// ReuseLimit is reuseLimit: a free stitched block (sBlock) serves a
	// request only if it is at most ReuseLimit times the rounded request.
	// Default 10. Must be positive and finite.
	ReuseLimit float64

	// DefragLevel is defragLevel: 0 stitches as soon as no free block
	// fits, before allocating; 1 only once a device allocation has failed;
	// 2 only once that has failed again after the cache was released.
	// Default 0.
	DefragLevel int

	// AutoGC is autoGC (which glake reads in GiB): when the stitched blocks
	// made and not collected exceed this many bytes, every stitched block
	// that is not live is collected (unmapped and its range freed).
	// Default 1000 GiB. Must be positive.
	AutoGC int64
}

// DefaultConfig returns glake's defaults: fragLimit 512 MiB, reuseLimit 10,
// defragLevel 0, autoGC 1000 GiB.
func DefaultConfig() Config {
	return Config{FragLimit: 512 * mib, ReuseLimit: 10, DefragLevel: 0, AutoGC: 1000 * gib}
}

// RoundSize returns the size GMLake sets aside for a request of size bytes
// (round_size, without roundup_power2_divisions): at least 512 bytes, a
// multiple of 512, and for the large pool (more than 1 MiB) a multiple of
// 2 MiB. It returns 0 for size < 1 or when the result would overflow.
func RoundSize(size int64) int64 {
	if size > math.MaxInt64-(ChunkSize-1) {
		return 0
	}
	r := torchsize.RoundToBlock(size)
	if r > torchsize.SmallSize {
		r = (size + ChunkSize - 1) &^ (ChunkSize - 1)
	}
	return r
}

// validate reports the first setting out of range as an error naming its
// key and wrapping a *gpualloc.ParamError.
func (c Config) validate() error {
	switch {
	case c.FragLimit < 0:
		return param.Error(name, "frag_limit", fmt.Sprint(c.FragLimit), "must not be negative")
	case !(c.ReuseLimit > 0) || math.IsInf(c.ReuseLimit, 0):
		return param.Error(name, "reuse_limit", fmt.Sprint(c.ReuseLimit), "must be a positive number")
	case c.DefragLevel < 0 || c.DefragLevel > 2:
		return param.Error(name, "defrag_level", fmt.Sprint(c.DefragLevel), "must be 0, 1 or 2")
	case c.AutoGC <= 0:
		return param.Error(name, "auto_gc", fmt.Sprint(c.AutoGC), "must be positive")
	}
	return nil
}

// spec returns the full spec of c.
func (c Config) spec() string {
	return fmt.Sprintf("%s:frag_limit=%d,reuse_limit=%s,defrag_level=%d,auto_gc=%d",
		name, c.FragLimit, strconv.FormatFloat(c.ReuseLimit, 'g', -1, 64), c.DefragLevel, c.AutoGC)
}
