package cuda

import (
	"fmt"
	"testing"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/sim"
	"github.com/gpualloc/gpualloc/traces"
)

// ReplayBoth replays the bundled trace bt with the strategy spec twice: on
// the simulator's device of capacity simCapacity, and through the CUDA
// backend that newBackend opens for each device of the trace, with the
// capacity cudaCapacity (0: the device's own). It returns the simulator's
// result and the backend's, for the tests to compare.
func ReplayBoth(tb testing.TB, bt traces.Bundle, spec string, simCapacity, cudaCapacity int64,
	newBackend func(device int) (gpualloc.Backend, error)) (simulated, cuda sim.Result) {
	tb.Helper()
	sp, err := gpualloc.ParseSpec(spec)
	if err != nil {
		tb.Fatal(err)
	}
	params, err := gpualloc.Resolve(sp, nil)
	if err != nil {
		tb.Fatal(err)
	}
	var res [2]sim.Result
	for i := range res {
		r, err := bt.Open()
		if err != nil {
			tb.Fatal(err)
		}
		cfg := sim.Config{Params: params, Capacity: simCapacity, SeriesBuckets: -1}
		if i == 1 {
			cfg.Backend, cfg.Capacity, cfg.NewBackend = "cuda", cudaCapacity, newBackend
		}
		if res[i], err = sim.Replay(r, cfg); err != nil {
			tb.Fatalf("Replay: %v", err)
		}
	}
	return res[0], res[1]
}

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
