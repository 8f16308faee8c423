// Package virtual is a virtual GPU: a [gpualloc.Backend] (and
// [gpualloc.VirtualMemory]) of a fixed capacity that hands out realistic
// addresses and holds no memory, so that a device of 80 GiB, or of many
// TiB, costs nothing but the books of what is live on it.
//
// It is the device the simulator replays traces on (package sim) and the
// one the conformance suite checks strategies on (strategy/strategytest),
// and a strategy's own tests, examples and benchmarks can use it directly.
// [Options] choose how it hands out addresses:
//
//   - By default addresses are never reused: each region takes the first
//     multiple of [Alignment] after the previous one, and Malloc and Free
//     are O(1), which is what a replay of millions of events wants.
//   - With [Options].Reuse, each region takes the lowest aligned address
//     where it fits between the live ones (first fit), as on a real device,
//     at O(regions) per Malloc and Free.
//
// Either way the device checks how it is used: a call that no correct
// allocator makes (a Free of an address it did not hand out or with another
// size, a Malloc of less than one byte, a virtual memory call that breaks
// the rules of [gpualloc.VirtualMemory]) fails with an error wrapping
// [gpualloc.ErrInvalidFree] or [gpualloc.ErrInvalidSize], changes nothing,
// and is counted in [Stats].InvalidCalls ([Device.Err] keeps the first).
// [Device.FailMallocs] makes it refuse allocations to reach an allocator's
// release-and-retry path.
package virtual
