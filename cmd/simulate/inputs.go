package main

import (
	"io"
	"sync"

	"github.com/gpualloc/gpualloc/traces"
)

// An input is a trace named on the command line, or a bundled one.
type input struct {
	name string
	open func() (traces.Reader, io.Closer, error)

	mu        sync.Mutex
	skipped   int64  // bad events a lenient reader skipped
	firstSkip string // the first of them
}

// traceInputs returns the traces the arguments name, or the bundled traces
// when there are none.
func traceInputs(args []string, opts traces.Options) ([]*input, error) {
	var ins []*input
	if len(args) == 0 {
		for _, b := range traces.Bundled() {
			in := &input{name: b.Name}
			in.open = func() (traces.Reader, io.Closer, error) {
				r, err := b.Open()
				if err != nil {
					return nil, nil, err
				}
				return r, in.closer(r), nil
			}
			ins = append(ins, in)
		}
		return ins, nil
	}
	for _, path := range args {
		in := &input{name: path}
		in.open = func() (traces.Reader, io.Closer, error) {
			r, err := traces.Open(path, opts)
			if err != nil {
				return nil, nil, err
			}
			return r, in.closer(r), nil
		}
		ins = append(ins, in)
	}
	return ins, nil
}

// closer closes r and notes what it skipped.
func (in *input) closer(r *traces.CSVReader) io.Closer {
	return closeFunc(func() error {
		in.mu.Lock()
		if n := r.Skipped(); n > in.skipped {
			in.skipped = n
			if err := r.FirstSkipped(); err != nil {
				in.firstSkip = err.Error()
			}
		}
		in.mu.Unlock()
		return r.Close()
	})
}

type closeFunc func() error

func (f closeFunc) Close() error { return f() }
