// Command simulate replays GPU allocation traces through memory-pool
// strategies and reports what each needs of the device. It is package cli's
// command with every built-in strategy; "simulate -h" prints its usage.
//
// With GPUALLOC_CPUPROFILE=FILE set, it writes a CPU profile of its run to
// FILE, as go tool pprof reads it. The build's profile-guided
// optimization, default.pgo beside this file, is such profiles merged
// (BENCHMARKS.md says how it is made).
package main

import (
	"fmt"
	"io"
	"os"
	"runtime/pprof"

	"github.com/gpualloc/gpualloc/cli"
	_ "github.com/gpualloc/gpualloc/strategy/all" // every built-in strategy
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is the command, with the profile that GPUALLOC_CPUPROFILE asks for.
func run(args []string, stdout, stderr io.Writer) int {
	if path := os.Getenv("GPUALLOC_CPUPROFILE"); path != "" {
		f, err := os.Create(path)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintf(stderr, "simulate: GPUALLOC_CPUPROFILE: %v\n", err)
			return 2
		}
		defer func() {
			pprof.StopCPUProfile()
			if err := f.Close(); err != nil {
				fmt.Fprintf(stderr, "simulate: GPUALLOC_CPUPROFILE: %v\n", err)
			}
		}()
	}
	return cli.Main(args, stdout, stderr)
}
