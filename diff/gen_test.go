package diff

import (
	"bytes"
	"testing"

	"github.com/gpualloc/gpualloc/diff/difftest"
	"github.com/gpualloc/gpualloc/explain"
	"github.com/gpualloc/gpualloc/sim"
	"github.com/gpualloc/gpualloc/snapshot"
	"github.com/gpualloc/gpualloc/traces"
)

// The generator of the tests' snapshots.
type genOp = difftest.Op

func genSnapshot(dev int, ops []genOp, conf string) []byte { return difftest.Snapshot(dev, ops, conf) }

func rankOps(k, entries int, skew int64) []genOp { return difftest.RankOps(k, entries, skew) }

// loadTrace reads a snapshot (or any trace) from data as simulate diff
// reads it: its events, start state, recorded memory and stacks.
func loadTrace(t testing.TB, name string, data []byte, annotations bool) *explain.Trace {
	t.Helper()
	r, err := traces.NewReader(bytes.NewReader(data), name, traces.Options{Stacks: true})
	if err != nil {
		t.Fatal(err)
	}
	evs, err := traces.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	tr := &explain.Trace{Name: name, Format: r.Format(), Events: evs, Start: traces.StartOf(r)}
	if m, ok := r.(sim.CapacityReporter); ok {
		tr.Memory = m
	}
	if tr.Format != "PyTorch snapshot" {
		return tr
	}
	if s, ok := r.(interface{ Snapshot() *snapshot.Snapshot }); ok {
		tr.Snapshot = s.Snapshot()
	}
	if annotations {
		if tr.Annotations, err = explain.ReadAnnotations(bytes.NewReader(data)); err != nil {
			t.Fatal(err)
		}
	}
	return tr
}
