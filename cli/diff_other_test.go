//go:build !unix

package cli

// cpuSeconds returns 0: the CPU time is read where getrusage is.
func cpuSeconds() float64 { return 0 }
