// Package host is a [gpualloc.Backend] of real host memory: each Malloc is an
// anonymous private mapping from the operating system (mmap), each Free
// unmaps it (munmap). Strategies run on it for real, so that a replay
// measures what their device calls cost, and a program can use a strategy
// for its own buffers, reading and writing them through [Backend.Bytes].
//
// The mappings are made with MAP_NORESERVE and are never touched by the
// backend: a mapping takes address space only, and the kernel gives it
// physical pages when, and only when, the program writes to them. Replaying a
// trace whose peak is many GiB therefore costs no memory beyond the page
// tables, even on a machine with less memory than the peak; a program that
// writes into all its blocks needs the memory it writes.
//
// The package works on Linux; elsewhere [Open] returns an error.
package host
