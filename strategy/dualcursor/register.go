package dualcursor

import (
	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/internal/param"
)

func init() {
	gpualloc.Register(gpualloc.Strategy{
		Name: name,
		Summary: "MindSpore's dual-cursor pool: static memory (parameters, optimizer state) from one end of a device block, " +
			"dynamic memory from the other, freed ranges reused by best fit on their own side and a cursor moving back over " +
			"free ranges at its top; MindSpore's own behaviour, one block of the whole device, is block=0,grow=none",
		Params: []gpualloc.Param{
			{Name: "align", Default: "512", Doc: "blocks are (request + pad) rounded up to a multiple of this many bytes, a power of two of at least 256 (MindSpore's kMemAlignSize, 512)"},
			{Name: "pad", Default: "32", Doc: "bytes added to every request before rounding (MindSpore's GetCommonAlignSize adds 32)"},
			{Name: "block", Default: "1073741824", Doc: "bytes of each device block, or more for a larger request; 0: all the device's free memory, as MindSpore takes the whole device"},
			{Name: "grow", Default: "block", Doc: "when no block has room: block (take another device block) or none (fail with out of memory, as MindSpore does when its cursors meet)"},
			{Name: "static", Default: "parameter+optimizer_state", Doc: "categories placed as static memory, joined by + (parameter, optimizer_state, input, activation, gradient, temporary, autograd_detail), or none; the others are dynamic, and unknown follows the unknown rule"},
			{Name: "unknown", Default: "before_first_free", Doc: "where allocations of unknown category go (traces without categories): before_first_free (static until the pool's first free, then dynamic), dynamic or static"},
			{Name: "static_end", Default: "high", Doc: "end of a block where static memory starts: high (MindSpore's MemoryManager: static down from the top, dynamic up from the base) or low (the mirror image)"},
		},
		New: param.Opener(readConfig, New),
	})
}

// readConfig reads a Config from resolved registry parameters.
func readConfig(r *param.Reader) Config {
	return Config{
		Align:     r.Size("align"),
		Pad:       r.Size("pad"),
		Block:     r.Size("block"),
		Grow:      param.Enum(r, "grow", parseGrowth, "must be block or none"),
		Static:    param.Enum(r, "static", parseCategorySet, staticWant),
		Unknown:   param.Enum(r, "unknown", parseUnknown, "must be before_first_free, dynamic or static"),
		StaticEnd: param.Enum(r, "static_end", parseEnd, "must be high or low"),
	}
}
