package planned_test

import (
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/internal/replaytest"
	"github.com/gpualloc/gpualloc/strategy/planned"
	"github.com/gpualloc/gpualloc/strategy/strategytest"
	"github.com/gpualloc/gpualloc/traces"
)

// bundledFile writes the bundled trace name to a file, a profile.
func bundledFile(b *testing.B, name string) string {
	bu, ok := traces.LookupBundled(name)
	if !ok {
		b.Fatalf("no bundled trace %s", name)
	}
	r, err := bu.Open()
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	path := filepath.Join(b.TempDir(), name+".csv.gz")
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	z := gzip.NewWriter(f)
	w := traces.NewWriter(z, traces.ColOp, traces.ColID, traces.ColSize)
	for r.Scan() {
		if err := w.Write(r.Event()); err != nil {
			b.Fatal(err)
		}
	}
	if err := r.Err(); err != nil {
		b.Fatal(err)
	}
	for _, c := range []interface{ Flush() error }{w} {
		if err := c.Flush(); err != nil {
			b.Fatal(err)
		}
	}
	for _, c := range []io.Closer{z, f} {
		if err := c.Close(); err != nil {
			b.Fatal(err)
		}
	}
	return path
}

// BenchmarkReplay replays the bundled training trace (91,588 events) held
// in memory: with profile=auto (the fallback serves it, the step is looked
// for, found and declined) and with the trace itself as profile (every
// request served from the plan), "engine" through sim.Replay, "direct" with
// a loop of Alloc and Free; the profile's reading and planning are not
// timed.
func BenchmarkReplay(b *testing.B) {
	events := replaytest.BundledEvents(b, "training")
	prof := bundledFile(b, "training")
	for _, p := range []struct{ name, profile string }{{"auto", planned.Auto}, {"profile", prof}} {
		b.Run(p.name, func(b *testing.B) {
			c := planned.DefaultConfig()
			c.Profile = p.profile
			replaytest.ReplayBoth(b, func(d gpualloc.Backend) (gpualloc.Allocator, error) { return planned.New(d, c) }, events)
		})
	}
}

// BenchmarkProfile measures New with the bundled training trace as its
// profile: reading 91,588 events, finding the step (907 requests) and
// planning its prefix and one step (2,258 buffers) with plan.Solve.
func BenchmarkProfile(b *testing.B) {
	c := planned.DefaultConfig()
	c.Profile = bundledFile(b, "training")
	var a *planned.Allocator
	var err error
	for b.Loop() {
		if a, err = planned.New(strategytest.NewDevice(1<<40), c); err != nil {
			b.Fatal(err)
		}
	}
	info, _ := a.Plan()
	b.ReportMetric(float64(info.Height), "plan-B")
}

// BenchmarkServe replays the bundled training trace with itself as profile,
// the allocator opened outside the timer: the cost of serving from the plan
// alone (BenchmarkReplay's rows include opening, which reads and plans the
// profile).
func BenchmarkServe(b *testing.B) {
	events := replaytest.BundledEvents(b, "training")
	c := planned.DefaultConfig()
	c.Profile = bundledFile(b, "training")
	var blocks []gpualloc.Block
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		a, err := planned.New(strategytest.NewDevice(1<<40), c)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if blocks, err = replaytest.Replay(a, events, blocks); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*len(events))/b.Elapsed().Seconds(), "events/s")
}
