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
//
// Run "simulate -h" or "simulate COMMAND -h" for the flags. Errors go to
// standard error as one line, "simulate: FILE:LINE: ..." where a trace is at
// fault. The exit status is 0 on success, 1 when a replay or an input failed
// and 2 for bad usage.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
)

// Main runs the simulate command with args (the arguments after the
// program's name) and returns its exit status: 0 on success, 1 when a replay
// or an input failed, 2 for bad usage. It reads the process's environment
// and standard input, writes results to stdout and errors to stderr, and
// stops early on an interrupt (Ctrl-C). A main function is then:
//
//	os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
func Main(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	c := Command{Stdin: os.Stdin, Stdout: stdout, Stderr: stderr, LookupEnv: os.LookupEnv}
	return c.Run(ctx, args)
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
// its exit status, as [Main] does; ctx's end stops a replay early.
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
	return simulate(ctx, e, args)
}

// env is what a run of the command sees of the world.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) (string, bool)
}

// usageError is bad usage: exit status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{fmt.Sprintf(format, args...)}
}

// errHelp ends a run that printed its help.
var errHelp = errors.New("help")

// simulate runs the command with args (without the program name) and
// returns its exit status.
func simulate(ctx context.Context, e *env, args []string) int {
	err := dispatch(ctx, e, args)
	var ue *usageError
	switch {
	case err == nil, errors.Is(err, errHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(e.stderr, "simulate: %s (see simulate -h)\n", oneLine(err.Error()))
		return 2
	default:
		fmt.Fprintf(e.stderr, "simulate: %s\n", oneLine(err.Error()))
		return 1
	}
}

func dispatch(ctx context.Context, e *env, args []string) error {
	if len(args) > 0 {
		switch args[0] {
		case "inspect":
			return inspectCmd(ctx, e, args[1:])
		case "convert":
			return convertCmd(e, args[1:])
		case "gen":
			return genCmd(e, args[1:])
		case "strategies":
			return strategiesCmd(e, args[1:])
		case "fidelity":
			return fidelityCmd(ctx, e, args[1:])
		case "plan":
			return planCmd(ctx, e, args[1:])
		case "tune":
			return tuneCmd(ctx, e, args[1:])
		case "merge":
			return mergeCmd(e, args[1:])
		case "help":
			return replayCmd(ctx, e, []string{"-h"})
		}
	}
	return replayCmd(ctx, e, args)
}

// oneLine folds an error message onto one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", "; ")), " ")
}
