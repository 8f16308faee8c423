//go:build !linux

package host

import (
	"errors"
	"runtime"
)

// Options configure a [Backend]; see the Linux documentation.
type Options struct {
	Capacity int64
}

// A Backend is host memory; it is only available on Linux.
type Backend struct{}

// Open fails: the host backend needs Linux.
func Open(Options) (*Backend, error) {
	return nil, errors.New("host: the host backend is not supported on " + runtime.GOOS)
}

func (*Backend) Malloc(int64) (uint64, error)        { return 0, errors.ErrUnsupported }
func (*Backend) Free(uint64, int64) error            { return errors.ErrUnsupported }
func (*Backend) MemInfo() (free, total int64)        { return 0, 0 }
func (*Backend) Held() (bytes int64, regions int)    { return 0, 0 }
func (*Backend) Bytes(uint64, int64) ([]byte, error) { return nil, errors.ErrUnsupported }
func (*Backend) Close() error                        { return nil }
