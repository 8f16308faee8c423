// Package vmem keeps the books of a device's virtual memory for the
// virtual device (backend/virtual) and the CUDA backend: reserved address
// ranges, physical memory and the mappings between them, with the checks
// that gpualloc.VirtualMemory's rules call for. It holds what is live, not
// counters of calls: the device counts its calls, and physical memory
// against its capacity, itself.
package vmem

import (
	"fmt"
	"slices"
	"sort"

	"github.com/gpualloc/gpualloc"
)

// A Space is the virtual memory of one device: ranges reserved first fit in
// the window [Base, Base+Size), physical memory in multiples of Gran. The
// zero Space is not usable; set Base, Size, Gran and Prefix (the start of
// its errors).
type Space struct {
	Base   uint64
	Size   uint64
	Gran   int64
	Prefix string

	ranges []*vrange          // reserved ranges, sorted by base
	phys   map[uint64]*phys   // live physical memory by handle
	maps   map[uint64]mapping // live mappings by address
	handle uint64             // last handle given

	reserved int64 // bytes of reserved ranges
	physical int64 // bytes of live physical memory
}

// A vrange is a reserved range; pages[i] is the handle mapped at its page
// i, 0 for none (pages beyond len(pages) have none).
type vrange struct {
	base  uint64
	size  int64
	pages []uint64
	live  int // mappings in the range
}

type phys struct {
	size int64
	maps int // mappings of it
}

type mapping struct {
	handle uint64
	size   int64
	r      *vrange
}

// InUse returns what the space holds: its reserved ranges and their bytes,
// its live physical memory allocations and their bytes, and its live
// mappings. O(1).
func (s *Space) InUse() (ranges int, reserved int64, handles int, physical int64, mappings int) {
	return len(s.ranges), s.reserved, len(s.phys), s.physical, len(s.maps)
}

func (s *Space) errorf(err error, format string, args ...any) error {
	return fmt.Errorf("%s: %s: %w", s.Prefix, fmt.Sprintf(format, args...), err)
}

func (s *Space) init() {
	if s.phys == nil {
		s.phys = make(map[uint64]*phys)
		s.maps = make(map[uint64]mapping)
	}
}

// CheckSize returns an error wrapping gpualloc.ErrInvalidSize unless size
// is a positive multiple of Gran.
func (s *Space) CheckSize(what string, size int64) error {
	if size <= 0 || size%s.Gran != 0 {
		return s.errorf(gpualloc.ErrInvalidSize, "%s of %d bytes, not a positive multiple of %d", what, size, s.Gran)
	}
	return nil
}

// Reserve reserves size bytes at the lowest address of the window where
// they fit. O(ranges).
func (s *Space) Reserve(size int64) (uint64, error) {
	if err := s.CheckSize("reserve", size); err != nil {
		return 0, err
	}
	s.init()
	addr, i := s.Base, 0
	for ; i < len(s.ranges); i++ {
		r := s.ranges[i]
		if r.base-addr >= uint64(size) {
			break
		}
		addr = r.base + uint64(r.size)
	}
	if s.Base+s.Size-addr < uint64(size) {
		return 0, s.errorf(gpualloc.ErrOutOfMemory, "reserve of %d bytes: address space exhausted", size)
	}
	s.ranges = slices.Insert(s.ranges, i, &vrange{base: addr, size: size})
	s.reserved += size
	return addr, nil
}

// Add records the range of size bytes at addr that a driver reserved, which
// must be aligned to Gran, lie in the window and overlap no other.
// O(ranges).
func (s *Space) Add(addr uint64, size int64) error {
	if err := s.CheckSize("reserve", size); err != nil {
		return err
	}
	if addr%uint64(s.Gran) != 0 || addr < s.Base || addr-s.Base > s.Size || s.Size-(addr-s.Base) < uint64(size) {
		return s.errorf(gpualloc.ErrInvalidFree, "range %#x+%d: not aligned to %d or outside [%#x, %#x+%d)", addr, size, s.Gran, s.Base, s.Base, s.Size)
	}
	s.init()
	i := sort.Search(len(s.ranges), func(i int) bool { return s.ranges[i].base >= addr })
	if (i > 0 && s.ranges[i-1].base+uint64(s.ranges[i-1].size) > addr) || (i < len(s.ranges) && s.ranges[i].base-addr < uint64(size)) {
		return s.errorf(gpualloc.ErrInvalidFree, "range %#x+%d overlaps a reserved range", addr, size)
	}
	s.ranges = slices.Insert(s.ranges, i, &vrange{base: addr, size: size})
	s.reserved += size
	return nil
}

// rangeAt returns the index of the reserved range that holds addr.
func (s *Space) rangeAt(addr uint64) (int, bool) {
	i := sort.Search(len(s.ranges), func(i int) bool { return s.ranges[i].base > addr }) - 1
	if i < 0 || addr-s.ranges[i].base >= uint64(s.ranges[i].size) {
		return 0, false
	}
	return i, true
}

// Unreserve frees the range Reserve returned at addr, of size bytes, which
// must have nothing mapped.
func (s *Space) Unreserve(addr uint64, size int64) error {
	i, err := s.checkUnreserve(addr, size)
	if err != nil {
		return err
	}
	s.ranges = slices.Delete(s.ranges, i, i+1)
	s.reserved -= size
	return nil
}

// CanUnreserve returns the error Unreserve would return, changing nothing.
func (s *Space) CanUnreserve(addr uint64, size int64) error {
	_, err := s.checkUnreserve(addr, size)
	return err
}

func (s *Space) checkUnreserve(addr uint64, size int64) (int, error) {
	i, ok := s.rangeAt(addr)
	if !ok || s.ranges[i].base != addr || s.ranges[i].size != size {
		return 0, s.errorf(gpualloc.ErrInvalidFree, "unreserve of %#x (%d bytes), not a reserved range", addr, size)
	}
	if n := s.ranges[i].live; n > 0 {
		return 0, s.errorf(gpualloc.ErrInvalidFree, "unreserve of %#x (%d bytes) with %d mappings in it", addr, size, n)
	}
	return i, nil
}

// Create records size bytes of physical memory, which the caller has
// checked with CheckSize and against its capacity, and returns its handle
// (never 0).
func (s *Space) Create(size int64) uint64 {
	s.init()
	s.handle++
	s.phys[s.handle] = &phys{size: size}
	s.physical += size
	return s.handle
}

// Release frees the physical memory of handle, which must be mapped
// nowhere, and returns its size.
func (s *Space) Release(handle uint64) (int64, error) {
	p, err := s.checkRelease(handle)
	if err != nil {
		return 0, err
	}
	delete(s.phys, handle)
	s.physical -= p.size
	return p.size, nil
}

// CanRelease returns the error Release would return, changing nothing.
func (s *Space) CanRelease(handle uint64) error {
	_, err := s.checkRelease(handle)
	return err
}

func (s *Space) checkRelease(handle uint64) (*phys, error) {
	p, ok := s.phys[handle]
	if !ok {
		return nil, s.errorf(gpualloc.ErrInvalidFree, "release of handle %d, not live physical memory", handle)
	}
	if p.maps > 0 {
		return nil, s.errorf(gpualloc.ErrInvalidFree, "release of handle %d (%d bytes), still mapped %d times", handle, p.size, p.maps)
	}
	return p, nil
}

// HandleSize returns the bytes of the physical memory of handle, 0 if it
// is not live.
func (s *Space) HandleSize(handle uint64) int64 {
	if p, ok := s.phys[handle]; ok {
		return p.size
	}
	return 0
}

// Map maps the physical memory of handle at addr, inside one reserved
// range, where nothing is mapped. O(pages mapped).
func (s *Space) Map(addr uint64, handle uint64) error {
	p, r, first, n, err := s.checkMap(addr, handle)
	if err != nil {
		return err
	}
	if len(r.pages) < first+n {
		r.pages = append(r.pages, make([]uint64, first+n-len(r.pages))...)
	}
	for j := first; j < first+n; j++ {
		r.pages[j] = handle
	}
	r.live++
	p.maps++
	s.maps[addr] = mapping{handle: handle, size: p.size, r: r}
	return nil
}

// CanMap returns the error Map would return, changing nothing. O(pages
// mapped).
func (s *Space) CanMap(addr uint64, handle uint64) error {
	_, _, _, _, err := s.checkMap(addr, handle)
	return err
}

// checkMap checks a Map and returns the memory, the range and its pages
// [first, first+n) that it maps.
func (s *Space) checkMap(addr uint64, handle uint64) (p *phys, r *vrange, first, n int, err error) {
	p, ok := s.phys[handle]
	if !ok {
		return nil, nil, 0, 0, s.errorf(gpualloc.ErrInvalidFree, "map of handle %d at %#x, not live physical memory", handle, addr)
	}
	i, ok := s.rangeAt(addr)
	if !ok {
		return nil, nil, 0, 0, s.errorf(gpualloc.ErrInvalidFree, "map of handle %d at %#x, outside every reserved range", handle, addr)
	}
	r = s.ranges[i]
	off := addr - r.base
	if off%uint64(s.Gran) != 0 || uint64(r.size)-off < uint64(p.size) {
		return nil, nil, 0, 0, s.errorf(gpualloc.ErrInvalidFree, "map of %d bytes at %#x: not aligned to %d or past the end of the range %#x+%d",
			p.size, addr, s.Gran, r.base, r.size)
	}
	first, n = int(off/uint64(s.Gran)), int(p.size/s.Gran)
	for _, h := range r.pages[min(first, len(r.pages)):min(first+n, len(r.pages))] {
		if h != 0 {
			return nil, nil, 0, 0, s.errorf(gpualloc.ErrInvalidFree, "map of %d bytes at %#x over memory mapped there already", p.size, addr)
		}
	}
	return p, r, first, n, nil
}

// Unmap unmaps what one Map mapped at addr, size bytes.
func (s *Space) Unmap(addr uint64, size int64) error {
	m, err := s.checkUnmap(addr, size)
	if err != nil {
		return err
	}
	first := int((addr - m.r.base) / uint64(s.Gran))
	clear(m.r.pages[first : first+int(size/s.Gran)])
	m.r.live--
	s.phys[m.handle].maps--
	delete(s.maps, addr)
	return nil
}

// CanUnmap returns the error Unmap would return, changing nothing.
func (s *Space) CanUnmap(addr uint64, size int64) error {
	_, err := s.checkUnmap(addr, size)
	return err
}

func (s *Space) checkUnmap(addr uint64, size int64) (mapping, error) {
	m, ok := s.maps[addr]
	if !ok {
		return mapping{}, s.errorf(gpualloc.ErrInvalidFree, "unmap of %#x (%d bytes), where no mapping begins", addr, size)
	}
	if m.size != size {
		return mapping{}, s.errorf(gpualloc.ErrInvalidFree, "unmap of %#x with size %d, mapped with size %d", addr, size, m.size)
	}
	return m, nil
}

// Mapped reports whether the size bytes at addr lie in mapped memory of one
// reserved range. O(pages).
func (s *Space) Mapped(addr uint64, size int64) bool {
	if size < 0 {
		return false
	}
	i, ok := s.rangeAt(addr)
	if !ok {
		return false
	}
	r := s.ranges[i]
	off := addr - r.base
	if uint64(r.size)-off < uint64(size) {
		return false
	}
	g := uint64(s.Gran)
	first, last := int(off/g), int((off+uint64(size)+g-1)/g)
	if last > len(r.pages) {
		return false
	}
	for _, h := range r.pages[first:last] {
		if h == 0 {
			return false
		}
	}
	return true
}
