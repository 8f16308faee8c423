package traces

// A MiniMallocBuffer is a buffer of a MiniMalloc problem as its file gives
// it: the id's text, and the half-open lifetime [Lower, Upper) (an
// inclusive end column has been turned into Upper = end+1, as MiniMalloc's
// own reader does).
type MiniMallocBuffer struct {
	ID                 string
	Lower, Upper, Size int64
}

// A MiniMallocReader is the optional interface of a [FileReader] of a
// MiniMalloc CSV: it gives the problem's buffers in the order of the file,
// the bad ones skipped in lenient mode, so that a planner can keep
// MiniMalloc's ids and times. Find it by type assertion:
//
//	if mr, ok := r.(traces.MiniMallocReader); ok { bufs := mr.MiniMallocBuffers() ... }
type MiniMallocReader interface {
	FileReader
	MiniMallocBuffers() []MiniMallocBuffer
}

// MiniMallocBuffers returns the buffers read, in the order of the file.
// It allocates the slice and the text of each id; call it before Close.
func (r *miniMallocReader) MiniMallocBuffers() []MiniMallocBuffer {
	out := make([]MiniMallocBuffer, len(r.bufs))
	for i, b := range r.bufs {
		id := string(b.tok)
		if b.tok == nil {
			id = formatID(b.id)
		}
		out[i] = MiniMallocBuffer{ID: id, Lower: b.lower, Upper: b.upper, Size: b.size}
	}
	return out
}
