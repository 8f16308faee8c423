//go:build !(linux && (amd64 || arm64))

package cuda

import (
	"fmt"
	"runtime"
)

// loadDriver reports that this platform has no CUDA driver the package can
// load.
func loadDriver() (*driver, error) {
	return nil, &openError{
		msg: fmt.Sprintf("no CUDA driver found (the cuda backend runs on linux/amd64 and linux/arm64, not %s/%s)",
			runtime.GOOS, runtime.GOARCH),
		errs: []error{ErrNoDriver},
	}
}

// hostMemory is never reached on this platform, where no driver loads.
func hostMemory() (int64, error) { return 0, ErrNoDriver }
