package pytorch

// A Stat is one of PyTorch's statistics: its current value and the largest
// it has been.
type Stat struct {
	Current, Peak int64
}

func (s *Stat) add(d int64) {
	s.Current += d
	if s.Current > s.Peak {
		s.Peak = s.Current
	}
}

// MemoryStats are the allocator's statistics under the names of
// torch.cuda.memory_stats (the "all" pool). ActiveBytes equals
// AllocatedBytes: there are no stream events holding freed blocks.
// InactiveSplitBytes counts free blocks in segments that are split, as
// PyTorch counts them. NumDeviceAlloc and NumDeviceFree count segment
// allocations and frees on the backend; NumAllocRetries the allocations
// retried after releasing every cached segment; NumOOMs the failures.
type MemoryStats struct {
	AllocatedBytes     Stat
	ReservedBytes      Stat
	ActiveBytes        Stat
	InactiveSplitBytes Stat
	RequestedBytes     Stat
	NumAllocRetries    Stat
	NumOOMs            Stat
	NumDeviceAlloc     Stat
	NumDeviceFree      Stat
}

// MemoryStats returns the allocator's statistics under PyTorch's names.
func (a *Allocator) MemoryStats() MemoryStats { return a.ms }

// Map returns the statistics as torch.cuda.memory_stats keys them:
// "allocated_bytes.all.current", "allocated_bytes.all.peak", ... for the
// byte counts, and "num_alloc_retries", "num_ooms", "num_device_alloc",
// "num_device_free" for the counters.
func (s MemoryStats) Map() map[string]int64 {
	m := make(map[string]int64, 14)
	for _, b := range []struct {
		key string
		s   Stat
	}{
		{"allocated_bytes", s.AllocatedBytes},
		{"reserved_bytes", s.ReservedBytes},
		{"active_bytes", s.ActiveBytes},
		{"inactive_split_bytes", s.InactiveSplitBytes},
		{"requested_bytes", s.RequestedBytes},
	} {
		m[b.key+".all.current"] = b.s.Current
		m[b.key+".all.peak"] = b.s.Peak
	}
	m["num_alloc_retries"] = s.NumAllocRetries.Current
	m["num_ooms"] = s.NumOOMs.Current
	m["num_device_alloc"] = s.NumDeviceAlloc.Current
	m["num_device_free"] = s.NumDeviceFree.Current
	return m
}
