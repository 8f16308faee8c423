package cli

import (
	"errors"
	"strings"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/backend/cuda"
)

// cudaBackend opens device 0 once to fail early, with the driver's own one
// line ("no CUDA driver found (...)"), where there is no GPU; each replay
// then opens the GPU of each device index of its trace, with its virtual
// memory management where the driver and device have it (for the
// strategies that map memory: gmlake, pytorch's expandable segments),
// reports its total memory as the capacity and closes it at the end.
func cudaBackend() (backendChoice, error) {
	b, err := cuda.Open(cuda.Options{Device: 0})
	if err != nil {
		if errors.Is(err, cuda.ErrNoDriver) || errors.Is(err, cuda.ErrNoDevice) {
			return backendChoice{}, errors.New(strings.TrimPrefix(err.Error(), "cuda: "))
		}
		return backendChoice{}, err
	}
	if err := b.Close(); err != nil {
		return backendChoice{}, err
	}
	return backendChoice{
		newBackend: func(device int) (gpualloc.Backend, error) {
			b, err := cuda.Open(cuda.Options{Device: device})
			if err != nil {
				return nil, err
			}
			v, err := b.Virtual()
			switch {
			case err == nil:
				return v, nil
			case errors.Is(err, cuda.ErrNoVirtualMemory):
				return b, nil
			default:
				b.Close()
				return nil, err
			}
		},
	}, nil
}

// pinnedBackend opens pinned memory once to fail early, as cudaBackend
// does; each replay then opens pinned memory in device 0's context for
// each device index of its trace, limited to capacity when capacitySet,
// else to the machine's memory (the limit is the capacity reported).
func pinnedBackend(capacity int64, capacitySet bool) (backendChoice, error) {
	if !capacitySet {
		capacity = 0
	}
	p, err := cuda.OpenPinned(cuda.PinnedOptions{Capacity: capacity})
	if err != nil {
		if errors.Is(err, cuda.ErrNoDriver) || errors.Is(err, cuda.ErrNoDevice) {
			return backendChoice{}, errors.New(strings.TrimPrefix(err.Error(), "cuda: "))
		}
		return backendChoice{}, err
	}
	_, limit := p.MemInfo()
	if err := p.Close(); err != nil {
		return backendChoice{}, err
	}
	return backendChoice{
		capacity: limit,
		newBackend: func(int) (gpualloc.Backend, error) {
			return cuda.OpenPinned(cuda.PinnedOptions{Capacity: limit})
		},
	}, nil
}
