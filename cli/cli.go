// Package cli is the simulate command as a library: the replay of traces
// through memory-pool strategies, its reports and every subcommand. A program
// that registers strategies of its own (in init, like a database/sql driver)
// and calls [Main] is the whole simulate command with those strategies in it:
//
//	func main() { os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr)) }
//
// The command knows the strategies registered in package gpualloc when it
// runs: cmd/simulate imports the built-in ones (strategy/all); a third
// party's main imports what it wants compared, its own strategies included.
//
// Usage:
//
//	simulate [flags] [TRACE...]          replay traces (no TRACE: the bundled sample traces)
//	simulate inspect [flags] TRACE...    describe traces
//	simulate convert IN OUT              any supported format to native CSV (.csv or .csv.gz)
//	simulate gen [flags] WORKLOAD        write a synthetic trace
//	simulate fidelity [flags] SNAPSHOT...  replay PyTorch snapshots with the pytorch strategy and compare its decisions with the recorded ones
//	simulate plan [flags] TRACE...       place every allocation knowing its lifetime: the offline plan against the lower bound
//	simulate strategies                  list strategies with their parameters and defaults
//	simulate tune [flags] TRACE          search PYTORCH_CUDA_ALLOC_CONF for the lowest peak reserved without OOM
//	simulate merge -o OUT DIR...         merge the outputs of --shard k/n runs into one report
//	simulate explain [flags] TRACE...    per device: the moment that matters, who holds the memory, the verdict and what would have fit
//	simulate diff [flags] A B [RANK...]  two runs side by side, or the ranks of a job: the differences by site, program or allocator
//
// Run "simulate -h" or "simulate COMMAND -h" ("simulate help COMMAND") for
// the flags. Errors go to standard error as one line, "simulate: FILE:LINE:
// ..." where a trace is at fault. The exit status is 0 on success, 1 when a
// replay or an input failed, 2 for bad usage, 130 after SIGINT (Ctrl-C) and
// 143 after SIGTERM. Every input, and every output a command writes, is
// checked before any work starts; output files are written under a
// temporary name and renamed once whole, and reports whole (see
// report.DirWriter), so that a run that fails or is interrupted leaves them
// as they were. An output file that is a symbolic link replaces the file
// the link leads to, as an editor does; one that is a character device or
// a FIFO is written through, and stays what it is.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gpualloc/gpualloc/traces"
)

// Main runs the simulate command with args (the arguments after the
// program's name) and returns its exit status: 0 on success, 1 when a replay
// or an input failed, 2 for bad usage, 130 after SIGINT (Ctrl-C) and 143
// after SIGTERM. It reads the process's environment and standard input, and
// writes results to stdout and errors to stderr. The first SIGINT or SIGTERM
// stops the run where it is: every output file is then either complete or as
// it was, since each is written under a temporary name and renamed into
// place; a second signal kills the process at once. A run that has not
// returned stopGrace after the first signal (one blocked in a write to a
// pipe that nobody reads, say) is ended there: Main removes the temporary
// files of the outputs being written and exits the process with the
// signal's status. A main function is then:
//
//	os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
//
// With GPUALLOC_CPUPROFILE=FILE set, Main writes a CPU profile of the run
// to FILE, as go tool pprof reads it.
func Main(args []string, stdout, stderr io.Writer) int {
	stop, ok := startProfile(os.LookupEnv, stderr)
	if !ok {
		return 2
	}
	defer stop()
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	var mu sync.Mutex // held by whichever ends the process: the run or the timer
	returned := false
	go func() {
		select {
		case s := <-sigs:
			signal.Stop(sigs) // the next signal has its default effect: the process ends
			ie := &interruptError{s}
			cancel(ie)
			time.AfterFunc(stopGrace, func() {
				mu.Lock()
				if returned {
					mu.Unlock()
					return
				}
				removeTemps()
				fmt.Fprintf(stderr, "simulate: %s: stopped, output files left complete or as they were\n", ie)
				os.Exit(ie.status())
			})
		case <-ctx.Done():
		}
	}()
	c := Command{Stdin: os.Stdin, Stdout: stdout, Stderr: stderr, LookupEnv: os.LookupEnv}
	code := c.Run(ctx, args)
	mu.Lock()
	returned = true
	mu.Unlock()
	return code
}

// stopGrace is how long Main waits, after the first signal, for the run
// to stop of itself.
var stopGrace = 3 * time.Second

// An interruptError is the cause of a run's end by a signal.
type interruptError struct{ sig os.Signal }

func (e *interruptError) Error() string {
	if e.sig == syscall.SIGTERM {
		return "interrupted by SIGTERM"
	}
	return "interrupted by SIGINT (Ctrl-C)"
}

// status is the exit status after the signal: 128 + its number, as a shell
// reports a process that the signal ended.
func (e *interruptError) status() int {
	if e.sig == syscall.SIGTERM {
		return 128 + 15
	}
	return 128 + 2
}

// A Command is one run of simulate with what it sees of the world: tests
// and embedding programs set its fields to run the command in-process with
// an environment of their own. The zero value reads nothing and writes
// nothing, and sees no environment variable.
type Command struct {
	// Stdin is read for the trace named "-"; nil reads nothing.
	Stdin io.Reader
	// Stdout receives results, Stderr errors, warnings and the progress
	// bar (shown only when Stderr is a terminal); nil discards.
	Stdout, Stderr io.Writer
	// LookupEnv looks up an environment variable (GPUALLOC_POOL_TYPE,
	// MXNET_GPU_MEM_POOL_TYPE, PYTORCH_ALLOC_CONF...); nil sees none.
	LookupEnv func(key string) (string, bool)
}

// Run runs the command with args (without the program's name) and returns
// its exit status, as [Main] does. ctx's end stops the run where it is, with
// its output files complete or as they were: the exit status is then 130
// (interrupted) when ctx was canceled, 128 + N when its cause is a signal
// that [Main] caught, and 1 for any other cause (a deadline).
func (c Command) Run(ctx context.Context, args []string) int {
	e := &env{stdin: c.Stdin, stdout: c.Stdout, stderr: c.Stderr, getenv: c.LookupEnv}
	if e.stdin == nil {
		e.stdin = strings.NewReader("")
	}
	if e.stdout == nil {
		e.stdout = io.Discard
	}
	if e.stderr == nil {
		e.stderr = io.Discard
	}
	if e.getenv == nil {
		e.getenv = func(string) (string, bool) { return "", false }
	}
	out := &stdoutWriter{w: e.stdout}
	e.stdout = out
	code := simulate(ctx, e, args)
	if code == 0 && out.err != nil {
		// A write that failed where nothing looked (the help): the run
		// did not give its output.
		fmt.Fprintf(e.stderr, "simulate: standard output: %v\n", out.err)
		return 1
	}
	return code
}

// A stdoutWriter is the command's standard output: its errors name it, as
// "standard output: no space left on device", and the first is kept, so
// that a run whose output was lost fails even where the write's error went
// unseen.
type stdoutWriter struct {
	w   io.Writer
	err error
}

func (s *stdoutWriter) Write(p []byte) (int, error) {
	n, err := s.w.Write(p)
	if err != nil {
		err = unwrapPathErr(err)
		if s.err == nil {
			s.err = err
		}
		return n, fmt.Errorf("standard output: %w", err)
	}
	return n, nil
}

// env is what a run of the command sees of the world.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) (string, bool)
	// readProgress, when not nil, shows how much of a trace file openTrace
	// opens is read, once the read takes readProgressDelay.
	readProgress io.Writer
	// tempDir is where reads make their temporary files (--temp-dir; ""
	// for the system's).
	tempDir string
}

// usageError is bad usage: exit status 2. cmd is the subcommand whose
// usage it is ("" for a replay), whose help the error points to.
type usageError struct{ msg, cmd string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// errHelp ends a run that printed its help.
var errHelp = errors.New("help")

// simulate runs the command with args (without the program name) and
// returns its exit status. A run that ctx ended says so whatever error the
// work stopped with: what a cancelled read or write reports is no news.
func simulate(ctx context.Context, e *env, args []string) int {
	cmd, err := dispatch(ctx, e, args)
	if ctx.Err() != nil {
		cause := context.Cause(ctx)
		var ie *interruptError
		switch {
		case errors.As(cause, &ie):
			fmt.Fprintf(e.stderr, "simulate: %s: stopped, output files left complete or as they were\n", ie)
			return ie.status()
		case errors.Is(cause, context.Canceled):
			fmt.Fprintf(e.stderr, "simulate: interrupted: stopped, output files left complete or as they were\n")
			return 128 + 2
		default:
			fmt.Fprintf(e.stderr, "simulate: stopped: %s\n", oneLine(cause.Error()))
			return 1
		}
	}
	var ue *usageError
	switch {
	case err == nil, errors.Is(err, errHelp):
		return 0
	case errors.As(err, &ue):
		help := "simulate -h"
		if ue.cmd != "" {
			help = "simulate " + ue.cmd + " -h"
		} else if cmd != "" {
			help = "simulate " + cmd + " -h"
		}
		fmt.Fprintf(e.stderr, "simulate: %s (see %s)\n", oneLine(err.Error()), help)
		return 2
	default:
		fmt.Fprintf(e.stderr, "simulate: %s\n", oneLine(err.Error()))
		return 1
	}
}

// commands are the subcommands, by name.
var commands = map[string]func(ctx context.Context, e *env, args []string) error{
	"inspect":    inspectCmd,
	"convert":    func(ctx context.Context, e *env, args []string) error { return convertCmd(ctx, e, args) },
	"gen":        genCmd,
	"strategies": func(_ context.Context, e *env, args []string) error { return strategiesCmd(e, args) },
	"fidelity":   fidelityCmd,
	"plan":       planCmd,
	"tune":       tuneCmd,
	"merge":      mergeCmd,
	"explain":    explainCmd,
	"diff":       diffCmd,
}

// dispatch runs the subcommand that args name, or a replay, and returns
// the subcommand's name ("" for a replay) with its error. A first argument
// that is no file, no bundled trace and no subcommand, but a subcommand
// misspelt ("stratgies"), is bad usage that names the subcommand.
func dispatch(ctx context.Context, e *env, args []string) (string, error) {
	if len(args) == 0 {
		return "", replayCmd(ctx, e, args)
	}
	name := args[0]
	if run, ok := commands[name]; ok {
		return name, run(ctx, e, args[1:])
	}
	if name == "help" {
		if len(args) > 1 {
			if run, ok := commands[args[1]]; ok { // "help gen" is "gen -h"
				return args[1], run(ctx, e, []string{"-h"})
			}
			if args[1] != "help" {
				names := slices.Sorted(maps.Keys(commands))
				return "", usagef("help %s: no such command (commands: %s)", args[1], strings.Join(names, ", "))
			}
		}
		return "", replayCmd(ctx, e, []string{"-h"})
	}
	if near := nearCommand(name); near != "" {
		return "", usagef("%s: no such command or file; did you mean 'simulate %s'?", name, near)
	}
	return "", replayCmd(ctx, e, args)
}

// nearCommand returns the subcommand (or "help") that arg misspells: one
// at most two edits (insertions, deletions, substitutions or swaps of
// neighbours) away, when arg is no flag, no file and no bundled trace; ""
// when none is.
func nearCommand(arg string) string {
	if arg == "" || arg == "-" || strings.HasPrefix(arg, "-") || strings.ContainsAny(arg, `/\.`) {
		return ""
	}
	if _, err := os.Lstat(arg); err == nil {
		return ""
	}
	if _, ok := traces.LookupBundled(arg); ok {
		return ""
	}
	names := []string{"help"}
	for n := range commands {
		names = append(names, n)
	}
	slices.Sort(names)
	best, bestD := "", 3
	for _, n := range names {
		if d := editDistance(strings.ToLower(arg), n); d < bestD && d < len(n) {
			best, bestD = n, d
		}
	}
	return best
}

// editDistance is the optimal string alignment distance of a and b: the
// fewest insertions, deletions, substitutions and swaps of neighbouring
// bytes that turn a into b.
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

// oneLine folds an error message onto one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", "; ")), " ")
}
