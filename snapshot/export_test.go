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
