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
	return a, nil
}

// Models names the allocator that the pytorch strategy follows when
// configured by conf (see [pytorch.Allocator.Models]): what a replay of
// [PyTorch] compares a snapshot with. A conf it cannot read names
// nothing.
func Models(conf string) string {
	c, err := pytorch.ParseConf(conf)
	if err != nil {
		return ""
	}
	return c.Models()
}
