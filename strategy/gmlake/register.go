package gmlake

import (
	"strconv"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/internal/param"
)

func init() {
	gpualloc.Register(gpualloc.Strategy{
		Name: name,
		Summary: "GMLake's virtual memory stitching (ASPLOS'24, glake): PyTorch's caching allocator whose large pool is made of 2 MiB " +
			"physical chunks, and which stitches free blocks into one new virtual range when no free block fits (needs a backend with virtual memory, else stitches nothing)",
		Params: []gpualloc.Param{
			{Name: "frag_limit", Default: "536870912", Doc: "only requests of at least this many bytes (rounded) are stitched; smaller ones are served as PyTorch serves them (glake's fragLimit, 512 MiB)"},
			{Name: "reuse_limit", Default: "10", Doc: "a free stitched block serves a request only if at most this many times its rounded size (glake's reuseLimit)"},
			{Name: "defrag_level", Default: "0", Doc: "0: stitch before allocating; 1: only after a device allocation failed; 2: only after it failed again once the cache was released (glake's defragLevel)"},
			{Name: "auto_gc", Default: "1073741824000", Doc: "when stitched blocks made and not collected exceed this many bytes, collect those not live (glake's autoGC, 1000 GiB)"},
		},
		New: param.Opener(readConfig, New),
	})
}

// readConfig reads a Config from resolved registry parameters.
func readConfig(r *param.Reader) Config {
	return Config{
		FragLimit:   r.Size("frag_limit"),
		ReuseLimit:  param.Enum(r, "reuse_limit", parseFloat, "want a positive number"),
		DefragLevel: r.Int("defrag_level", "must be 0, 1 or 2"),
		AutoGC:      r.Size("auto_gc"),
	}
}

func parseFloat(s string) (float64, bool) {
	f, err := strconv.ParseFloat(s, 64)
	return f, err == nil
}
