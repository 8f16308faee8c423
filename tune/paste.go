package tune

import (
	"strconv"

	"github.com/gpualloc/gpualloc/strategy/pytorch"
)

// Call returns the Python call that sets the memory fraction of the
// report's replays (pytorch.FractionCall), which the program makes beside
// the line of Line, since PyTorch reads no fraction from its variable:
// torch.cuda.set_per_process_memory_fraction(F), or torch.npu's for
// torch_npu's allocator; "" without a fraction.
func (r *Report) Call() string {
	if r.MemoryFraction <= 0 {
		return ""
	}
	return pytorch.FractionCall(r.withAllocator("memory_fraction:" + strconv.FormatFloat(r.MemoryFraction, 'g', -1, 64)))
}
