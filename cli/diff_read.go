package cli

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/gpualloc/gpualloc/explain"
	"github.com/gpualloc/gpualloc/sim"
	"github.com/gpualloc/gpualloc/snapshot"
	"github.com/gpualloc/gpualloc/traces"
)

// diffTrace reads in as explainTrace does, but a file's two reads, its
// events and (for a PyTorch snapshot) its stacks, at once: on a machine of
// two cores, a trace in about the time of one read, while memory holds
// the one trace. A trace that can be read only once, or a bundled one,
// is read as explainTrace reads it.
func diffTrace(ctx context.Context, e *env, in *input, lenient, annotations bool) (*explain.Trace, error) {
	if in.once || in.size < 0 {
		return explainTrace(ctx, e, in, lenient, annotations)
	}
	type stacks struct {
		s   *snapshot.Snapshot
		a   *explain.Annotations
		err error
	}
	done := make(chan stacks, 1)
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		var out stacks
		defer func() { done <- out }()
		f, err := os.Open(in.name)
		if err != nil {
			out.err = err
			return
		}
		defer f.Close()
		if out.s, out.err = snapshot.ReadWith(ctxReader(sctx, f), in.name, snapshot.ReadOptions{}); out.err != nil || !annotations {
			return
		}
		if _, err := f.Seek(0, 0); err != nil {
			out.err = err
			return
		}
		if out.a, err = explain.ReadAnnotations(ctxReader(sctx, f)); err != nil {
			out.err = fmt.Errorf("%s: %w", in.name, err)
		}
	}()
	r, c, err := in.open()
	if err != nil {
		cancel()
		<-done
		return nil, err
	}
	events, err := traces.ReadAll(r)
	if cerr := c.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		cancel()
		<-done
		return nil, err
	}
	t := &explain.Trace{Name: in.name, Events: events}
	if f, ok := r.(traces.FileReader); ok {
		t.Format = f.Format()
	}
	if s, ok := r.(sim.StartReporter); ok {
		t.Start = s
	}
	if m, ok := r.(sim.CapacityReporter); ok {
		t.Memory = m
	}
	if t.Format != "PyTorch snapshot" {
		cancel() // the other read fails: no snapshot
		<-done
		return t, nil
	}
	st := <-done
	if st.err != nil {
		var se *snapshot.Error
		if errors.As(st.err, &se) {
			return nil, st.err
		}
		return nil, fmt.Errorf("%s: %w", in.name, st.err)
	}
	t.Snapshot, t.Annotations = st.s, st.a
	return t, nil
}
