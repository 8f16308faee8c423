//go:build linux

package host

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/gpualloc/gpualloc"
)

// Options configure a [Backend]. The zero value is a backend without a
// limit.
type Options struct {
	// Capacity, if > 0, limits the bytes held at once: MemInfo reports
	// (Capacity - held, Capacity), and a Malloc beyond it fails with
	// gpualloc.ErrOutOfMemory, as a device of that size would. Held bytes
	// are the sizes asked for, not rounded up to pages, so that a replay on
	// a limited host backend runs out of memory exactly where one on a
	// simulated device of the same capacity does.
	//
	// 0 means no limit: MemInfo reports the system's available memory
	// (MemAvailable of /proc/meminfo, else sysinfo's free RAM) and its total
	// memory, and a Malloc fails only when the operating system refuses the
	// mapping.
	Capacity int64
}

// memInfoTTL is how long MemInfo reuses the system's figures without a
// limit: reading /proc/meminfo takes microseconds, and pools ask for the
// free memory before every device allocation.
const memInfoTTL = 10 * time.Millisecond

// A Backend hands out anonymous mappings of host memory. It is safe for
// concurrent use.
type Backend struct {
	capacity int64

	mu      sync.Mutex
	regions map[uint64][]byte // live mappings by address; len is the size asked for
	held    int64             // sum of the sizes asked for of live mappings
	closed  bool

	// The system's figures for MemInfo without a limit, and when they were
	// read.
	sysFree, sysTotal int64
	sysRead           time.Time
}

// Open returns a host backend.
func Open(opts Options) (*Backend, error) {
	if opts.Capacity < 0 {
		return nil, fmt.Errorf("host: negative capacity %d", opts.Capacity)
	}
	b := &Backend{capacity: opts.Capacity, regions: map[uint64][]byte{}}
	if b.capacity == 0 {
		if _, _, err := systemMemory(); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// Malloc maps size bytes of fresh, zeroed host memory, reserved but not
// touched (see the package documentation). It fails with an error wrapping
// gpualloc.ErrOutOfMemory beyond the capacity limit or when the operating
// system has no room (ENOMEM), and with gpualloc.ErrInvalidSize for size <= 0.
func (b *Backend) Malloc(size int64) (uint64, error) {
	if size <= 0 {
		return 0, fmt.Errorf("host: malloc of %d bytes: %w", size, gpualloc.ErrInvalidSize)
	}
	if size > int64(^uint(0)>>1) {
		return 0, fmt.Errorf("host: malloc of %d bytes: %w", size, gpualloc.ErrOutOfMemory)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, errors.New("host: malloc on a closed backend")
	}
	if b.capacity > 0 && size > b.capacity-b.held {
		return 0, fmt.Errorf("host: malloc of %d bytes with %d of %d free: %w",
			size, b.capacity-b.held, b.capacity, gpualloc.ErrOutOfMemory)
	}
	data, err := syscall.Mmap(-1, 0, int(size), syscall.PROT_READ|syscall.PROT_WRITE,
		syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS|syscall.MAP_NORESERVE)
	if err != nil {
		if errors.Is(err, syscall.ENOMEM) {
			return 0, fmt.Errorf("host: mmap of %d bytes: %v: %w", size, err, gpualloc.ErrOutOfMemory)
		}
		return 0, fmt.Errorf("host: mmap of %d bytes: %w", size, err)
	}
	addr := uint64(uintptr(unsafe.Pointer(unsafe.SliceData(data))))
	b.regions[addr] = data
	b.held += size
	return addr, nil
}

// Free unmaps a region that Malloc returned, given its address and the size
// asked for. Any other address or size is an error wrapping
// gpualloc.ErrInvalidFree, and the region, if there is one, stays mapped.
func (b *Backend) Free(addr uint64, size int64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	data, ok := b.regions[addr]
	switch {
	case !ok:
		return fmt.Errorf("host: free of %#x (%d bytes), which is not mapped: %w", addr, size, gpualloc.ErrInvalidFree)
	case int64(len(data)) != size:
		return fmt.Errorf("host: free of %#x with %d bytes, mapped with %d: %w", addr, size, len(data), gpualloc.ErrInvalidFree)
	}
	if err := syscall.Munmap(data); err != nil {
		return fmt.Errorf("host: munmap of %#x (%d bytes): %w", addr, size, err)
	}
	delete(b.regions, addr)
	b.held -= size
	return nil
}

// MemInfo reports free and total bytes: of the capacity limit when there is
// one, else of the system (see [Options.Capacity]). Without a limit the
// system's figures are read at most every few milliseconds; mappings made by
// Malloc do not lower them until their pages are written.
func (b *Backend) MemInfo() (free, total int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.capacity > 0 {
		return b.capacity - b.held, b.capacity
	}
	if now := time.Now(); b.sysRead.IsZero() || now.Sub(b.sysRead) >= memInfoTTL {
		if f, t, err := systemMemory(); err == nil {
			b.sysFree, b.sysTotal = f, t
		}
		b.sysRead = now
	}
	return b.sysFree, b.sysTotal
}

// Held returns the bytes of the live mappings (the sizes asked for) and how
// many there are.
func (b *Backend) Held() (bytes int64, regions int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.held, len(b.regions)
}

// Bytes returns the size bytes at addr as a slice, for reading and writing
// them. The range must lie inside one live region: a block of an allocator on
// this backend always does. An address inside a region (a block that a
// strategy split from a larger region) costs a search through the live
// regions; a region's own address is found at once.
//
// Lifetime: the slice is valid only while the memory is the caller's, that
// is until the block is given back to its allocator (or the region to Free).
// A pooled strategy may hand the same bytes out again, or unmap them at any
// later call; touching unmapped memory kills the process with SIGSEGV, which
// no recover catches. Do not keep the slice past the block's Free.
func (b *Backend) Bytes(addr uint64, size int64) ([]byte, error) {
	if size < 0 {
		return nil, fmt.Errorf("host: bytes of %#x: negative size %d", addr, size)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if data, ok := b.regions[addr]; ok {
		if size > int64(len(data)) {
			return nil, fmt.Errorf("host: bytes %#x..%#x past the end of the region of %d bytes at %#x",
				addr, addr+uint64(size), len(data), addr)
		}
		return data[:size:size], nil
	}
	for start, data := range b.regions {
		if addr < start || addr >= start+uint64(len(data)) {
			continue
		}
		off := addr - start
		if uint64(size) > uint64(len(data))-off {
			return nil, fmt.Errorf("host: bytes %#x..%#x past the end of the region of %d bytes at %#x",
				addr, addr+uint64(size), len(data), start)
		}
		return data[off : off+uint64(size) : off+uint64(size)], nil
	}
	return nil, fmt.Errorf("host: bytes of %#x: not in a live region", addr)
}

// Close unmaps every region still held; the backend cannot be used after
// it. Slices from Bytes must not be used after Close.
func (b *Backend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	var errs []error
	for addr, data := range b.regions {
		if err := syscall.Munmap(data); err != nil {
			errs = append(errs, fmt.Errorf("host: munmap of %#x (%d bytes): %w", addr, len(data), err))
		}
		delete(b.regions, addr)
	}
	b.held = 0
	return errors.Join(errs...)
}

// systemMemory returns the system's available and total memory:
// MemAvailable and MemTotal of /proc/meminfo, else sysinfo(2)'s free and
// total RAM.
func systemMemory() (free, total int64, err error) {
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		free, total = parseMeminfo(data)
		if free > 0 && total > 0 {
			return free, total, nil
		}
	}
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err != nil {
		return 0, 0, fmt.Errorf("host: reading the system's memory: %w", err)
	}
	unit := int64(si.Unit)
	if unit == 0 {
		unit = 1
	}
	return int64(si.Freeram) * unit, int64(si.Totalram) * unit, nil
}

// parseMeminfo returns MemAvailable and MemTotal in bytes from the text of
// /proc/meminfo, 0 for a line that is missing.
func parseMeminfo(data []byte) (avail, total int64) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		name, rest, ok := bytes.Cut(sc.Bytes(), []byte(":"))
		if !ok {
			continue
		}
		var dst *int64
		switch string(name) {
		case "MemAvailable":
			dst = &avail
		case "MemTotal":
			dst = &total
		default:
			continue
		}
		f := bytes.Fields(rest)
		if len(f) == 0 {
			continue
		}
		n, err := strconv.ParseInt(string(f[0]), 10, 64)
		if err != nil {
			continue
		}
		if len(f) > 1 && string(f[1]) == "kB" {
			n *= 1024
		}
		*dst = n
	}
	return avail, total
}
