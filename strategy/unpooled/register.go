package unpooled

import "github.com/gpualloc/gpualloc"

func init() {
	gpualloc.Register(gpualloc.Strategy{
		Name:    "unpooled",
		Summary: "MXNet's Unpooled storage: every Alloc a device allocation of the exact size, every Free a device free",
		New: func(b gpualloc.Backend, _ *gpualloc.Params) (gpualloc.Allocator, error) {
			return New(b, DefaultConfig())
		},
	})
}
