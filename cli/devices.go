package cli

import "github.com/gpualloc/gpualloc/sim"

// perDevice returns results with, after the result of each trace of
// several devices, one result per device (see sim.Result.PerDevice): the
// rows simulate prints. A trace of one device keeps its one row.
func perDevice(results []sim.Result) []sim.Result {
	var out []sim.Result
	for _, r := range results {
		out = append(out, r.PerDevice()...)
	}
	return out
}
