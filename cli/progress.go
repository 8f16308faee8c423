package cli

import (
	"context"
	"io"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/gpualloc/gpualloc/snapshot"
)

// progressEvery is the shortest time between two updates of the bar.
const progressEvery = 150 * time.Millisecond

// A progress shows how far the replays have come, on a terminal: a bar of
// the bytes of the trace files read so far against their size times the
// strategies, when every trace is a file; else the events replayed and
// their rate, the number of events of a trace being unknown until its end.
// Its callbacks are safe for concurrent use.
type progress struct {
	bar    *progressbar.ProgressBar
	events atomic.Int64 // events replayed, over all jobs
	inputs []*input     // whose bytes read make the bar, nil if unknown
	total  int64        // bytes to read in all
	next   atomic.Int64 // when to update the bar next, Unix ns
	start  time.Time
}

// checkProgress checks the value of --progress.
func checkProgress(mode string) error {
	switch mode {
	case "auto", "always", "never":
		return nil
	}
	return usagef("--progress %q: want auto, always or never", mode)
}

// showProgress reports whether --progress mode shows a bar on w: always,
// never, or (auto) when w is a terminal.
func showProgress(mode string, w io.Writer) bool {
	switch mode {
	case "always":
		return true
	case "auto":
		f, ok := w.(*os.File)
		return ok && term.IsTerminal(int(f.Fd()))
	}
	return false
}

// newProgress returns a progress bar on w for the replays of inputs, each
// through the given number of strategies.
func newProgress(w io.Writer, inputs []*input, strategies int) *progress {
	p := &progress{inputs: inputs, start: time.Now()}
	for _, in := range inputs {
		if in.size < 0 {
			p.inputs, p.total = nil, 0
			break
		}
		p.total += in.size * int64(strategies)
	}
	jobs := int64(len(inputs) * strategies)
	opts := []progressbar.Option{
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription("replaying " + plural(jobs, "job")),
		progressbar.OptionSetWidth(24),
		progressbar.OptionThrottle(progressEvery),
		progressbar.OptionClearOnFinish(),
		progressbar.OptionSetRenderBlankState(true),
	}
	max := p.total
	if p.inputs == nil || p.total <= 0 {
		p.inputs, max = nil, -1
		opts = append(opts, progressbar.OptionSpinnerType(14))
	} else {
		opts = append(opts,
			progressbar.OptionShowBytes(true),
			progressbar.OptionUseIECUnits(true),
			progressbar.OptionSetPredictTime(true),
		)
	}
	p.bar = progressbar.NewOptions64(max, opts...)
	return p
}

// job returns the sim.Config.Progress function of one replay, which gets
// the events that replay has done so far.
func (p *progress) job() func(events int64) {
	var last int64 // this job's count at the last call: only its goroutine calls
	return func(events int64) {
		p.events.Add(events - last)
		last = events
		p.poke()
	}
}

// poke updates the bar, at most once every progressEvery, while the
// traces are read before their events replay (a PyTorch snapshot is read
// whole first): the bar then follows the bytes read.
func (p *progress) poke() {
	now := time.Now().UnixNano()
	next := p.next.Load()
	if now < next || !p.next.CompareAndSwap(next, now+int64(progressEvery)) {
		return
	}
	p.update()
}

// update shows the events replayed so far, their rate and, when the
// traces' sizes are known, the share of their bytes read.
func (p *progress) update() {
	n := p.events.Load()
	desc := "replaying: " + shortCount(n) + " events"
	if s := time.Since(p.start).Seconds(); s > 0 {
		desc += ", " + shortCount(int64(float64(n)/s)) + "/s"
	}
	p.bar.Describe(desc)
	if p.inputs == nil {
		p.bar.Set64(n)
		return
	}
	var read int64
	for _, in := range p.inputs {
		read += in.read.Load()
	}
	p.bar.Set64(min(read, p.total))
}

// finish removes the bar.
func (p *progress) finish() {
	p.bar.Finish()
	p.bar.Exit()
}

// shortCount formats an event count in a few characters: 950, 12.3k, 4.56M.
func shortCount(n int64) string {
	f := float64(n)
	for _, u := range []struct {
		div    float64
		suffix string
	}{{1e9, "G"}, {1e6, "M"}, {1e3, "k"}} {
		if f >= u.div {
			return strconv.FormatFloat(f/u.div, 'f', max(0, 3-len(strconv.Itoa(int(f/u.div)))), 64) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}

// addReadProgress adds --progress to fs, for a command that reads traces
// before it works on them, into mode.
func addReadProgress(fs *pflag.FlagSet, mode *string) {
	fs.StringVar(mode, "progress", "auto", "show how much of each trace file is read, once a read takes 2 s: auto (on standard error when it is a terminal), always or never")
}

// readProgressTo checks --progress mode and returns where reads show their
// progress: w when mode shows it there, else nil.
func readProgressTo(mode string, w io.Writer) (io.Writer, error) {
	if err := checkProgress(mode); err != nil {
		return nil, err
	}
	if showProgress(mode, w) {
		return w, nil
	}
	return nil, nil
}

// readSnapshotProgress reads the PyTorch snapshot in f, named name, showing
// the read's progress on progress if not nil (see readProgress), without
// its stacks if noStacks, with its temporary file, if any, in tempDir (see
// snapshot.ReadOptions); it fails with ctx's cause once ctx is done.
func readSnapshotProgress(ctx context.Context, f *os.File, name string, progress io.Writer, noStacks bool, tempDir string) (*snapshot.Snapshot, error) {
	size := int64(-1)
	if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
		size = fi.Size()
	}
	return readSnapshotFrom(ctx, fileReader(ctx, f), name, size, progress, noStacks, tempDir)
}

// readSnapshotFrom reads the PyTorch snapshot in r, of size bytes (-1:
// unknown), as readSnapshotProgress does; r should fail with ctx's cause
// once ctx is done.
func readSnapshotFrom(ctx context.Context, r io.Reader, name string, size int64, progress io.Writer, noStacks bool, tempDir string) (*snapshot.Snapshot, error) {
	o := snapshot.ReadOptions{NoStacks: noStacks, TempDir: tempDir}
	if progress != nil {
		update, done := readProgress(progress, name, size)
		defer done()
		o.Progress = update
	}
	return snapshot.ReadWith(r, name, o)
}

// readProgressDelay is how long a read goes before it shows its progress;
// tests set it to 0.
var readProgressDelay = 2 * time.Second

// readProgress returns a snapshot.ReadOptions.Progress function that shows
// on w the bytes of a file of size bytes (-1 if unknown) read so far, once
// the read has taken readProgressDelay, and a function that removes the
// bar.
func readProgress(w io.Writer, name string, size int64) (update func(read int64), done func()) {
	start := time.Now()
	var bar *progressbar.ProgressBar
	update = func(read int64) {
		if bar == nil {
			if time.Since(start) < readProgressDelay {
				return
			}
			opts := []progressbar.Option{
				progressbar.OptionSetWriter(w),
				progressbar.OptionSetDescription("reading " + name),
				progressbar.OptionSetWidth(24),
				progressbar.OptionThrottle(progressEvery),
				progressbar.OptionClearOnFinish(),
				progressbar.OptionSetRenderBlankState(true),
				progressbar.OptionShowBytes(true),
				progressbar.OptionUseIECUnits(true),
			}
			if size > 0 {
				opts = append(opts, progressbar.OptionSetPredictTime(true))
			} else {
				size = -1
			}
			bar = progressbar.NewOptions64(size, opts...)
		}
		if size > 0 {
			read = min(read, size)
		}
		bar.Set64(read)
	}
	done = func() {
		if bar != nil {
			bar.Finish()
			bar.Exit()
		}
	}
	return update, done
}
