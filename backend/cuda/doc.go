// Package cuda is a [gpualloc.Backend] on a real NVIDIA GPU, through the CUDA
// driver API: Malloc is cuMemAlloc_v2, Free cuMemFree_v2 and MemInfo
// cuMemGetInfo_v2, so that any strategy runs on the device as it runs on the
// virtual one (backend/virtual).
//
//	b, err := cuda.Open(cuda.Options{Device: 0})
//	if err != nil {
//		return err // errors.Is(err, cuda.ErrNoDriver) or cuda.ErrNoDevice on a machine without a GPU
//	}
//	defer b.Close()
//	a, err := gpualloc.Open("round", b)
//
// # Virtual memory
//
// On a device with CUDA's virtual memory management (CUDA 10.2 and later,
// CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED), [Backend.Virtual]
// returns a [VirtualBackend]: the same device, and a [gpualloc.VirtualMemory]
// whose calls are cuMemAddressReserve, cuMemAddressFree, cuMemCreate,
// cuMemRelease, cuMemMap with cuMemSetAccess, and cuMemUnmap, on which
// PyTorch's expandable segments and GMLake's stitching run as they do on the
// simulator's device. A *Backend itself is no gpualloc.VirtualMemory, so that
// strategies fall back to Malloc where the driver (the functions are looked
// up at load time, and are optional) or the device lacks it:
//
//	v, err := b.Virtual()
//	if errors.Is(err, cuda.ErrNoVirtualMemory) {
//		// use b
//	}
//	a, err := gpualloc.Open("pytorch:expandable_segments=true", v)
//
// # Pinned host memory
//
// [OpenPinned] returns a [PinnedBackend]: page-locked host memory from
// cuMemAllocHost_v2 and cuMemFreeHost in a device's primary context, as a
// gpualloc.Backend of a capacity of its own (the machine's memory unless
// given), so that any strategy pools pinned memory as PyTorch's
// CachingHostAllocator does:
//
//	p, err := cuda.OpenPinned(cuda.PinnedOptions{Capacity: 16 << 30})
//	a, err := gpualloc.Open("pytorch", p)
//
// # Loading
//
// The package uses no cgo and needs no CUDA toolkit to build: Open loads the
// driver library (libcuda.so.1, else libcuda.so) at run time with dlopen,
// through github.com/ebitengine/purego, and calls its functions by address.
// A program that imports the package builds with CGO_ENABLED=0 and runs
// on machines without a GPU; there Open returns one line that says what is
// missing, wrapping [ErrNoDriver] or [ErrNoDevice], and never panics. The
// driver is loaded once per process and never unloaded. The backend runs on
// linux/amd64 and linux/arm64; elsewhere Open reports ErrNoDriver. Because
// purego calls dlopen from the C library, a program that imports the
// package is dynamically linked against libc even with CGO_ENABLED=0: it
// runs on any glibc system, but cannot be a fully static binary.
//
// # Contexts and threads
//
// A CUDA driver call acts in the context current on the calling OS thread,
// and Go moves goroutines between threads at will. A Backend uses the
// device's primary context (the one the CUDA runtime and PyTorch use, shared
// by everything in the process that opens the device) and, for each
// operation, locks the goroutine to its thread (runtime.LockOSThread), makes
// the context current with cuCtxSetCurrent, makes its calls, and unlocks.
// Setting the context costs one store to thread-local storage in the driver;
// doing it every time, rather than locking the caller's goroutine for the
// backend's lifetime, lets the backend be used from any goroutine, alongside
// other code that switches contexts on the same threads. Calls on one Backend
// are serialized by a mutex.
//
// # Bookkeeping and errors
//
// A Backend keeps the address and size of every allocation it made and has
// not freed: Free of an unknown address or with another size fails with
// [gpualloc.ErrInvalidFree] without calling the driver, and Close frees what
// is left before it releases the primary context. A VirtualBackend keeps
// its ranges, physical memory and mappings likewise, refuses what breaks
// gpualloc.VirtualMemory's rules without calling the driver, and Close
// unmaps, releases and unreserves what is left first. A failed driver call is an
// [*Error] whose message carries CUDA's name and description of the code
// ("cuMemAlloc_v2: CUDA_ERROR_INVALID_VALUE: invalid argument");
// CUDA_ERROR_OUT_OF_MEMORY wraps [gpualloc.ErrOutOfMemory], which the
// strategies act on.
//
// # Costs
//
// These are the costs that pooling strategies exist to avoid. On an H200
// (BENCHMARKS.md), cuMemAlloc_v2 takes 3 µs for 4 KiB among other live
// allocations, 46 µs for 2 MiB and 0.44 ms for 1 GiB, and up to ten times
// as much when the block is alone in its page or its memory was freed a
// moment before; cuMemAllocHost_v2 takes 0.4 s a GiB. cuMemFree_v2
// synchronizes the device: it waits for all work queued on it to finish
// before the memory goes back, so one free in a training step stalls the
// GPU's pipeline. Package devicecost turns a table of these costs into
// each replay's device_time_ns_est. Every allocation is at least 256
// bytes aligned and takes device memory in units of the driver's page (2 MiB
// for large allocations), so many small allocations cost more than their
// sizes. MemInfo counts the memory of every process on the device.
//
// # Tests on a GPU
//
// The package's tests check the error mapping, the bookkeeping and the
// context discipline against a fake driver everywhere, and that Open fails
// cleanly where there is no GPU. On a machine with an NVIDIA driver and GPU
// the same command also runs the strategy conformance suite with every
// device call mirrored on the GPU, replays the bundled traces on the GPU
// (with the virtual memory strategies too, checking their figures against
// the simulator's), runs each virtual memory call on the device, and
// measures cuMemAlloc/cuMemFree latency by size, and every call's cost
// (BenchmarkDeviceCalls, which writes a devicecost table):
//
//	go test ./backend/cuda/
//	go test ./backend/cuda/ -run '^$' -bench MallocFree
//	GPUALLOC_DEVICE_COSTS=mygpu.csv go test ./backend/cuda/ -run '^$' -bench DeviceCalls
//
// Tests that need a GPU skip, saying why, where there is none. They use
// device 0; set CUDA_VISIBLE_DEVICES to choose another.
package cuda
