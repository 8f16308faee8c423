// Package all registers every built-in strategy. A program that lets its
// users name any of them imports it for its side effect:
//
//	import _ "github.com/gpualloc/gpualloc/strategy/all"
package all

import (
	_ "github.com/gpualloc/gpualloc/strategy/bestfit"  // best fit with splitting and coalescing (TensorFlow BFC, RMM, Paddle, CuPy)
	_ "github.com/gpualloc/gpualloc/strategy/bfc"      // TensorFlow's (and XLA/JAX's) BFC allocator
	_ "github.com/gpualloc/gpualloc/strategy/buddy"    // binary buddy over arenas
	_ "github.com/gpualloc/gpualloc/strategy/gmlake"   // GMLake's virtual memory stitching
	_ "github.com/gpualloc/gpualloc/strategy/naive"    // MXNet's Naive pool
	_ "github.com/gpualloc/gpualloc/strategy/planned"  // STAlloc's plan-guided allocation
	_ "github.com/gpualloc/gpualloc/strategy/pytorch"  // PyTorch's CUDA caching allocator
	_ "github.com/gpualloc/gpualloc/strategy/round"    // MXNet's Round pool
	_ "github.com/gpualloc/gpualloc/strategy/tlsf"     // two-level segregated fit
	_ "github.com/gpualloc/gpualloc/strategy/unpooled" // MXNet's Unpooled
)

import _ "github.com/gpualloc/gpualloc/strategy/dualcursor" // MindSpore's dual-cursor pool
