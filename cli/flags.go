package cli

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/pflag"
)

// newFlagSet returns a flag set whose -h prints usage, followed by the
// flags, on standard output.
func newFlagSet(e *env, name, usage string) *pflag.FlagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.SortFlags = false
	fs.Usage = func() {
		fmt.Fprint(e.stdout, usage)
		fmt.Fprint(e.stdout, fs.FlagUsages())
	}
	return fs
}

// parseFlags parses args; -h prints the usage (pflag calls fs.Usage) and
// gives errHelp, a bad flag gives a usage error.
func parseFlags(fs *pflag.FlagSet, args []string) error {
	err := fs.Parse(args)
	if errors.Is(err, pflag.ErrHelp) {
		return errHelp
	}
	if err != nil {
		return usagef("%v", err)
	}
	return nil
}
