package cli

import (
	"fmt"
	"strings"

	"github.com/gpualloc/gpualloc"
)

const strategiesUsage = `usage: simulate strategies

Lists the registered strategies with their parameters, defaults and the
environment variables that supply defaults. Name one with -s SPEC, as
round or round:cutoff=20,page=4096, or with GPUALLOC_POOL_TYPE. A value may
name several, each a variant of its own: a range 20..24, a range with a
step 0..64/16, a list 64|128|inf; several such parameters give every
combination.

`

func strategiesCmd(e *env, args []string) error {
	fs := newFlagSet(e, "simulate strategies", strategiesUsage)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("strategies: no arguments expected")
	}
	var b strings.Builder
	for i, name := range gpualloc.Names() {
		s, err := gpualloc.Lookup(name)
		if err != nil {
			return err
		}
		if i > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "%s\n    %s\n", s.Name, s.Summary)
		for _, p := range s.Params {
			fmt.Fprintf(&b, "    %s=%s\n        %s", p.Name, p.Default, p.Doc)
			if len(p.Env) > 0 {
				fmt.Fprintf(&b, " (env: %s)", strings.Join(p.Env, ", "))
			}
			b.WriteString("\n")
		}
	}
	_, err := fmt.Fprint(e.stdout, b.String())
	return err
}
