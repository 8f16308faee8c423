package cli

import (
	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/backend/host"
)

// A backendChoice is what -b and --capacity make of the replays' backends.
type backendChoice struct {
	// capacity is Config.Capacity: the virtual device's size, a host
	// limit, or 0 for the backend's own total.
	capacity int64
	// newBackend is Config.NewBackend, nil for the virtual device.
	newBackend func(device int) (gpualloc.Backend, error)
}

// chooseBackend resolves -b: sim is a virtual device of capacity bytes, or,
// when --capacity was not given (capacitySet), of the device's memory as
// the trace tells it (a PyTorch snapshot that records an out-of-memory
// error) and else of the default 80 GiB; host is host memory, limited to
// capacity when --capacity was given, else to the machine's total memory,
// so that the capacity reported is the limit that held (mmap alone would
// hand out address space far beyond it that is never touched); cuda is the
// GPU of each device index, of its own size; pinned is page-locked host
// memory, limited as host is.
func chooseBackend(name string, capacity int64, capacitySet bool) (backendChoice, error) {
	switch name {
	case "sim":
		if !capacitySet {
			return backendChoice{}, nil // virtual.DefaultCapacity, or the trace's
		}
		return backendChoice{capacity: capacity}, nil
	case "host":
		// Fail before any replay if the host backend cannot be had here.
		b, err := host.Open(host.Options{})
		if err != nil {
			return backendChoice{}, err
		}
		_, limit := b.MemInfo()
		b.Close()
		if capacitySet {
			limit = capacity
		}
		return backendChoice{
			capacity: limit,
			newBackend: func(int) (gpualloc.Backend, error) {
				return host.Open(host.Options{Capacity: limit})
			},
		}, nil
	case "cuda":
		if capacitySet {
			return backendChoice{}, usagef("--capacity applies to the sim, host and pinned backends, not to cuda")
		}
		return cudaBackend()
	case "pinned":
		return pinnedBackend(capacity, capacitySet)
	}
	return backendChoice{}, usagef("unknown backend %q (known: sim, host, cuda, pinned)", name)
}
