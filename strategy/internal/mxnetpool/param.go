package mxnetpool

import (
	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/internal/param"
)

// Register registers the MXNet pool named name, as [gpualloc.Register]
// does, with the parameters every MXNet pool has around the one of its own
// rounding: "page", which pageDoc says what it is to the pool, rounding,
// and "reserve". read reads the pool's Config from them, and newPool builds
// the pool of it (see [param.Opener]).
func Register[C any, P gpualloc.Allocator](name, summary, pageDoc string, rounding gpualloc.Param,
	read func(*param.Reader) C, newPool func(gpualloc.Backend, C) (P, error)) {
	gpualloc.Register(gpualloc.Strategy{
		Name:    name,
		Summary: summary,
		Params:  []gpualloc.Param{pageParam(pageDoc), rounding, reserveParam()},
		New:     param.Opener(read, newPool),
	})
}

// pageParam returns the registry parameter "page" of an MXNet pool, 4096
// bytes by default, read from MXNET_GPU_MEM_POOL_PAGE_SIZE or MXNet 2's
// MXNET_GPU_POOL_PAGE_SIZE. doc says what the page is to the pool.
func pageParam(doc string) gpualloc.Param {
	return gpualloc.Param{
		Name:    "page",
		Default: "4096",
		Doc:     doc,
		Env:     []string{"MXNET_GPU_MEM_POOL_PAGE_SIZE", "MXNET_GPU_POOL_PAGE_SIZE"},
	}
}

// reserveParam returns the registry parameter "reserve" of an MXNet pool
// ([Options.Reserve]), 5 percent by default, read from
// MXNET_GPU_MEM_POOL_RESERVE.
func reserveParam() gpualloc.Param {
	return gpualloc.Param{
		Name:    "reserve",
		Default: "5",
		Doc:     "percent of the device a device allocation leaves free, else the cache is released first",
		Env:     []string{"MXNET_GPU_MEM_POOL_RESERVE"},
	}
}

// reserveRange is what a bad reserve is told.
const reserveRange = "must be a percentage from 0 to 100"

// Reserve reads the parameter "reserve" from r as an int. A value that is
// not an integer, or too large for an int, is an error naming where it came
// from; the range is [New]'s to check.
func Reserve(r *param.Reader) int { return r.Int("reserve", reserveRange) }
