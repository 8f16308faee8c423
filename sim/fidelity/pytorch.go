package fidelity

import (
	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/pytorch"
)

// PyTorch makes the pytorch strategy's allocator: the [NewFunc] that the
// simulate fidelity command replays.
func PyTorch(b gpualloc.Backend, conf string) (Allocator, error) {
	c, err := pytorch.ParseConf(conf)
	if err != nil {
		return nil, err
	}
	a, err := pytorch.New(b, c)
	if err != nil {
		return nil, err
	}
	return pytorchAllocator{a}, nil
}

type pytorchAllocator struct{ *pytorch.Allocator }

func (p pytorchAllocator) Restore(s SegmentState) ([]gpualloc.Block, error) {
	st := pytorch.SegmentState{Addr: s.Addr, Size: s.Size, Stream: s.Stream, Expandable: s.Expandable,
		Blocks: make([]pytorch.BlockState, len(s.Blocks))}
	for i, b := range s.Blocks {
		st.Blocks[i] = pytorch.BlockState{Size: b.Size, Requested: b.Requested, Live: b.Live}
	}
	return p.Allocator.Restore(st)
}

// ReleaseAll gives back the cached segments, when the strategy can.
func (p pytorchAllocator) ReleaseAll() error {
	if r, ok := any(p.Allocator).(gpualloc.Releaser); ok {
		return r.ReleaseAll()
	}
	return nil
}
