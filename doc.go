// Package gpualloc is the small core of a framework of pluggable GPU
// memory-pool strategies.
//
// An [Allocator] hands out [Block]s of device memory that it takes from a
// [Backend]: a virtual device (backend/virtual), host memory or a real GPU.
// Everything else a strategy can do (report [Stats], give its cache back to
// the device, allocate per stream) is an optional interface discovered by
// type assertion, the way database/sql/driver does it.
//
// Strategies register themselves by name in their package's init function,
// like image decoders or database/sql drivers. A program names one by a spec
// such as "round:cutoff=20,page=4096" and opens it with [Open], or lets the
// environment choose with [FromEnv]: GPUALLOC_POOL_TYPE first, then MXNet's
// MXNET_GPU_MEM_POOL_TYPE, then the default "naive", as in MXNet.
//
//	import (
//		"github.com/gpualloc/gpualloc"
//		_ "github.com/gpualloc/gpualloc/strategy/round"
//	)
//
//	a, err := gpualloc.FromEnv(backend)
package gpualloc
