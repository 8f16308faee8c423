package cuda

import (
	"fmt"

	"github.com/gpualloc/gpualloc/sim"
)

// figures names the figures of a replay that the tests compare between a
// CUDA backend and the simulator.
var figures = map[string]func(sim.Result) int64{
	"peak reserved":       func(r sim.Result) int64 { return r.PeakReservedBytes },
	"peak allocated":      func(r sim.Result) int64 { return r.PeakAllocatedBytes },
	"device mallocs":      func(r sim.Result) int64 { return r.DeviceMallocs },
	"device frees":        func(r sim.Result) int64 { return r.DeviceFrees },
	"device malloc bytes": func(r sim.Result) int64 { return r.DeviceMallocBytes },
	"device maps":         func(r sim.Result) int64 { return r.DeviceMaps },
	"device unmaps":       func(r sim.Result) int64 { return r.DeviceUnmaps },
	"cache hits":          func(r sim.Result) int64 { return r.CacheHits },
	"ooms":                func(r sim.Result) int64 { return r.OOMs },
}

// DiffFigures returns a line for each of the named figures on which a
// replay through a CUDA backend and the same replay on the simulator
// differ.
func DiffFigures(cuda, simulated sim.Result, names ...string) []string {
	var diffs []string
	for _, name := range names {
		f, ok := figures[name]
		if !ok {
			panic("DiffFigures: no figure " + name)
		}
		if c, s := f(cuda), f(simulated); c != s {
			diffs = append(diffs, fmt.Sprintf("%s: %d through the backend, %d on the simulator", name, c, s))
		}
	}
	return diffs
}
