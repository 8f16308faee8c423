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
