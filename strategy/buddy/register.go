package buddy

import (
	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/internal/param"
)

func init() {
	gpualloc.Register(gpualloc.Strategy{
		Name:    name,
		Summary: "binary buddy allocator (Knowlton 1965): power-of-two blocks split by halves from arenas (halved while the device refuses them) and merged with their buddies on free",
		Params: []gpualloc.Param{
			{
				Name:    "min_block",
				Default: "512",
				Doc:     "smallest block in bytes, a power of two: every request is rounded up to a power of two at least this large",
			},
			{
				Name:    "arena",
				Default: "1073741824",
				Doc:     "bytes taken from the device at a time (1 GiB), a power of two at least min_block; a larger request gets an arena of its own rounded size; when the device refuses an arena, halves of it are asked for instead, down to the request's rounded size",
			},
		},
		New: param.Opener(readConfig, New),
	})
}

// readConfig reads a Config from resolved registry parameters.
func readConfig(r *param.Reader) Config {
	return Config{MinBlock: r.Size("min_block"), Arena: r.Size("arena")}
}
