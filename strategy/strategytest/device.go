package strategytest

import (
	"fmt"

	"github.com/gpualloc/gpualloc/backend/virtual"
)

// NewDevice returns the device every check runs on: a [virtual.Device] of
// capacity bytes that reuses freed addresses first fit, as a real device
// does, and checks how it is used (see [virtual.Stats].InvalidCalls). It is
// useful on its own too, in a strategy's tests, examples and benchmarks: it
// counts mallocs, frees and bytes, reports what it holds
// ([virtual.Device.Regions], [virtual.Device.Holds]), and can be told to
// refuse mallocs to reach an allocator's retry path
// ([virtual.Device.FailMallocs]). It panics if capacity is not positive.
func NewDevice(capacity int64) *virtual.Device {
	if capacity <= 0 {
		panic(fmt.Sprintf("strategytest: NewDevice(%d): capacity must be positive", capacity))
	}
	d, err := virtual.New(virtual.Options{Capacity: capacity, Reuse: true})
	if err != nil {
		panic("strategytest: " + err.Error())
	}
	return d
}
