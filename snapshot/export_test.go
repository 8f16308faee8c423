package snapshot

// ReadOgrek is the decoder that Read used before it streamed, kept for
// comparing the two.
var ReadOgrek = readOgrek

// RunsFromStart returns o with a read that looks up runs of frames read
// before from its first memo entries on.
func RunsFromStart(o ReadOptions) ReadOptions {
	o.runsFrom = 1
	return o
}

// Ahead returns o with a read that reads its input ahead on a goroutine
// from its first bytes on.
func Ahead(o ReadOptions) ReadOptions {
	o.prefetchFrom = 1
	return o
}

// MaxTrace returns o with a read that refuses a device's trace of more
// than n entries.
func MaxTrace(o ReadOptions, n int) ReadOptions {
	o.maxTrace = n
	return o
}

// SpillAfter returns o with a read that holds at most n bytes of full
// pages (none for 0) before it writes them to its temporary file, and at
// most loaded of the pages written loaded at a time.
func SpillAfter(o ReadOptions, n int64, loaded int) ReadOptions {
	o.MaxHeld, o.maxLoaded = max(n, 1), loaded
	return o
}

// Spilled returns the bytes that the read of s, a compact one, wrote to
// its temporary file, where its traces read it back.
func Spilled(s *Snapshot) int64 {
	for _, t := range s.traces {
		if t.held != nil && t.held.f != nil {
			return t.held.f.Size()
		}
	}
	return 0
}

// CloseSpill closes the temporary file that the traces of s, a compact
// read, read back from, so that reading back fails.
func CloseSpill(s *Snapshot) {
	for _, t := range s.traces {
		if t.held != nil && t.held.f != nil {
			t.held.f.Close()
		}
	}
}

// Traces returns a copy of the entries of each device trace of s.
func Traces(s *Snapshot) [][]TraceEntry {
	out := make([][]TraceEntry, s.NumTraces())
	for d := range out {
		out[d] = s.Trace(d).Entries()
	}
	return out
}

// Flat returns a copy of s whose traces show copies of their entries, so
// that two snapshots read or built in different ways compare equal when
// they hold the same.
func Flat(s *Snapshot) *Snapshot {
	if s == nil {
		return nil
	}
	c := *s
	c.SetTraces(Traces(s)...)
	return &c
}
