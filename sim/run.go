package sim

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync"

	"github.com/gpualloc/gpualloc/traces"
)

// A Job is one replay for [RunAll]: a trace, which the job opens itself, and
// the Config that names the strategy.
type Job struct {
	// Open opens the trace. Each job opens its own reader, so that jobs on
	// the same trace can run at once. The closer, if not nil, is closed
	// when the replay ends.
	Open   func() (traces.Reader, io.Closer, error)
	Config Config
}

// A JobResult is the outcome of one [Job]: its Result, or the error that
// stopped it (with what was measured up to then, as [Replay] returns it).
type JobResult struct {
	Result Result
	Err    error
}

// RunAll runs the jobs on up to workers goroutines at once (workers <= 0
// means runtime.GOMAXPROCS(0)) and returns their outcomes in the order of
// jobs, whatever the order they finish in. A job's failure does not stop the
// others; when ctx is done, the replays under way stop and the jobs not
// started fail with ctx's error. A panic in a job (a strategy's bug) is
// turned into that job's error.
//
// The jobs share nothing the engine writes to; their Configs may share
// *gpualloc.Params, which the engine only reads. Config.Progress is called
// from the job's goroutine, so a Progress function shared by jobs must be
// safe for concurrent use.
func RunAll(ctx context.Context, jobs []Job, workers int) []JobResult {
	out := make([]JobResult, len(jobs))
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	workers = min(workers, len(jobs))
	next := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range next {
				out[i] = runJob(ctx, jobs[i])
			}
		})
	}
	for i := range jobs {
		next <- i
	}
	close(next)
	wg.Wait()
	return out
}

func runJob(ctx context.Context, j Job) (jr JobResult) {
	defer func() {
		if p := recover(); p != nil {
			jr.Err = fmt.Errorf("%spanic during replay: %v", jobPrefix(j.Config), p)
		}
	}()
	if err := ctx.Err(); err != nil {
		return JobResult{Err: err}
	}
	if j.Open == nil {
		return JobResult{Err: fmt.Errorf("sim: job for trace %q has no Open function", j.Config.Trace)}
	}
	r, c, err := j.Open()
	if err != nil {
		return JobResult{Err: err}
	}
	if c != nil {
		defer func() {
			if cerr := c.Close(); cerr != nil && jr.Err == nil {
				jr.Err = cerr
			}
		}()
	}
	res, err := ReplayContext(ctx, r, j.Config)
	return JobResult{Result: res, Err: err}
}

// jobPrefix returns "TRACE: STRATEGY: " for a job's errors, without the
// parts that are unknown.
func jobPrefix(c Config) string {
	var p string
	if c.Trace != "" {
		p += c.Trace + ": "
	}
	switch {
	case c.Strategy != "":
		name, _, _ := strings.Cut(c.Strategy, ":")
		p += name + ": "
	case c.Params != nil:
		p += c.Params.Strategy() + ": "
	}
	return p
}
