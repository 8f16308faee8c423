package cli

import (
	"fmt"
	"io"
	"os"
	"runtime/pprof"
)

// envCPUProfile is the variable with which Main writes a CPU profile of
// its run to a file, as go tool pprof reads it: the build's
// profile-guided optimization (cmd/simulate/default.pgo) is such
// profiles merged.
const envCPUProfile = "GPUALLOC_CPUPROFILE"

// startProfile starts the CPU profile that lookup's envCPUProfile asks
// for and returns what stops it and closes its file. Where the file
// cannot be made or the profile started, it writes one line to stderr,
// leaves no file, and returns false.
func startProfile(lookup func(string) (string, bool), stderr io.Writer) (stop func(), ok bool) {
	path, set := lookup(envCPUProfile)
	if !set || path == "" {
		return func() {}, true
	}
	f, err := os.Create(path)
	if err == nil {
		if err = pprof.StartCPUProfile(f); err != nil {
			f.Close()
			os.Remove(path)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "simulate: %s: %v\n", envCPUProfile, err)
		return nil, false
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			fmt.Fprintf(stderr, "simulate: %s: %v\n", envCPUProfile, err)
		}
	}, true
}
