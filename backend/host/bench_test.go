//go:build linux

package host_test

import (
	"testing"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/backend/host"
	"github.com/gpualloc/gpualloc/sim"
	"github.com/gpualloc/gpualloc/traces"
)

// BenchmarkReplayHost replays each bundled trace through each strategy on
// the host backend: every device allocation a real mmap, every device free
// a munmap (unpooled makes one of each per alloc and free of the trace).
// One op is a replay of the whole trace; ns/event is the cost of an alloc or
// free of the trace, the engine's own few nanoseconds included, and
// device-calls/event how many mmap and munmap calls each event made.
func BenchmarkReplayHost(b *testing.B) {
	for _, bundle := range traces.Bundled() {
		r, err := bundle.Open()
		if err != nil {
			b.Fatal(err)
		}
		events, err := traces.ReadAll(r)
		if err != nil {
			b.Fatal(err)
		}
		for _, name := range gpualloc.Names() {
			p, err := gpualloc.Resolve(gpualloc.Spec{Name: name}, nil)
			if err != nil {
				b.Fatal(err)
			}
			cfg := sim.Config{
				Params:        p,
				Backend:       "host",
				SeriesBuckets: -1,
				NewBackend: func(int) (gpualloc.Backend, error) {
					return host.Open(host.Options{})
				},
			}
			b.Run(bundle.Name+"/"+name, func(b *testing.B) {
				var n, calls int64
				for b.Loop() {
					res, err := sim.Replay(traces.NewSliceReader(bundle.Name, events), cfg)
					if err != nil {
						b.Fatal(err)
					}
					n += res.Events
					calls += res.DeviceMallocs + res.DeviceFrees
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/event")
				b.ReportMetric(float64(calls)/float64(n), "device-calls/event")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}
