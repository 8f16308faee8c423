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

// SpillAfter makes a read hold at most n bytes of full pages before it
// writes them to its temporary file, and at most loaded of the pages
// written loaded at a time, until the returned function is called.
func SpillAfter(n int64, loaded int) (restore func()) {
	oldN, oldL := spillAfter, maxLoaded
	spillAfter, maxLoaded = n, loaded
	return func() { spillAfter, maxLoaded = oldN, oldL }
}

// Spilled returns the bytes that the read of s, a compact one, wrote to
// its temporary file.
func Spilled(s *Snapshot) int64 {
	for _, h := range s.held {
		return h.sp.end
	}
	return 0
}
