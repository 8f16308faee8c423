package snapshot

// ReadOgrek is the decoder that Read used before it streamed, kept for
// comparing the two.
var ReadOgrek = readOgrek

// LookUpRunsFrom makes the decoder look up runs of frames read before from
// the n-th memo entry on, until the returned function is called.
func LookUpRunsFrom(n int) (restore func()) {
	old := runsFrom
	runsFrom = n
	return func() { runsFrom = old }
}

// PrefetchFrom makes a read start reading ahead on a goroutine once n
// bytes are read, until the returned function is called.
func PrefetchFrom(n int64) (restore func()) {
	old := prefetchFrom
	prefetchFrom = n
	return func() { prefetchFrom = old }
}

// MaxTrace makes a read refuse a device's trace of more than n entries,
// until the returned function is called.
func MaxTrace(n int) (restore func()) {
	old := maxTrace
	maxTrace = n
	return func() { maxTrace = old }
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
	for _, h := range s.held {
		if h.f != nil {
			return h.f.Size()
		}
	}
	return 0
}

// CloseSpill closes the temporary file that the traces of s, a compact
// read, read back from, so that reading back fails.
func CloseSpill(s *Snapshot) {
	for _, h := range s.held {
		if h.f != nil {
			h.f.Close()
		}
	}
}
