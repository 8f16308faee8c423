// Command simulate replays GPU allocation traces through memory-pool
// strategies and reports what each needs of the device.
//
// Usage:
//
//	simulate [flags] [TRACE...]          replay traces (no TRACE: the bundled sample traces)
//	simulate inspect [flags] TRACE...    describe traces
//	simulate convert IN OUT              any supported format to native CSV (.csv or .csv.gz)
//	simulate gen [flags] WORKLOAD        write a synthetic trace
//	simulate fidelity [flags] SNAPSHOT...  replay PyTorch snapshots with the pytorch strategy and compare its decisions with the recorded ones
//	simulate strategies                  list strategies with their parameters and defaults
//
// Run "simulate -h" or "simulate COMMAND -h" for the flags. Errors go to
// standard error as one line, "simulate: FILE:LINE: ..." where a trace is at
// fault. The exit status is 0 on success, 1 when a replay or an input failed
// and 2 for bad usage.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"

	_ "github.com/gpualloc/gpualloc/strategy/all"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := simulate(ctx, &env{
		stdin:  os.Stdin,
		stdout: os.Stdout,
		stderr: os.Stderr,
		getenv: os.LookupEnv,
	}, os.Args[1:])
	stop()
	os.Exit(code)
}

// env is what a run of the command sees of the world, so that tests can run
// it in-process.
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
