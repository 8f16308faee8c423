package traces

// MiniMallocBuffers calls add with each buffer read, in the order of the
// file, the bad ones skipped in lenient mode: the id's text, and the
// half-open lifetime [lower, upper) (an inclusive end column has been
// turned into upper = end+1, as MiniMalloc's own reader does). A planner
// keeps MiniMalloc's ids and times so (see plan.FromMiniMalloc, which finds
// the method by type assertion). It allocates the text of each id; call it
// before Close.
func (r *miniMallocReader) MiniMallocBuffers(add func(id string, lower, upper, size int64)) {
	for _, b := range r.bufs {
		id := string(b.tok)
		if b.tok == nil {
			id = formatID(b.id)
		}
		add(id, b.lower, b.upper, b.size)
	}
}
