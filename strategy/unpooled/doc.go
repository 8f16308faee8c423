// Package unpooled is MXNet's "Unpooled" GPU storage (MXNET_GPU_MEM_POOL_TYPE=
// Unpooled): no pool at all.
//
// # Policy
//
// Every Alloc is a device allocation of exactly the size asked for and every
// Free a device free, as MXNet's unpooled storage manager calls cudaMalloc
// and cudaFree directly. Nothing is rounded and nothing is cached, so the
// memory held from the device is exactly the memory live: the baseline
// against which the pools' overhead and their savings in device calls are
// measured. An allocation the device refuses fails with
// [gpualloc.ErrOutOfMemory] (MXNet aborts); the allocator stays usable.
//
// # Costs
//
// Alloc and Free are O(1) on top of the device call and allocate nothing in
// steady state. Memory: one map entry per live block.
//
// # Registry
//
// The package registers the strategy "unpooled", which has no parameters.
package unpooled
