// Command simulate replays GPU allocation traces through memory-pool
// strategies and reports what each needs of the device. It is package cli's
// command with every built-in strategy; "simulate -h" prints its usage.
//
// The build is guided by default.pgo beside this file: CPU profiles of
// the command (GPUALLOC_CPUPROFILE=FILE, see cli.Main) merged, as
// BENCHMARKS.md says.
package main

import (
	"os"

	"github.com/gpualloc/gpualloc/cli"
	_ "github.com/gpualloc/gpualloc/strategy/all" // every built-in strategy
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
}
