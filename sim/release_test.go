package sim

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc/traces"
)

func replayText(t *testing.T, text string, capacity int64) Result {
	t.Helper()
	r, err := traces.NewReader(strings.NewReader(text), "t.csv", traces.Options{})
	require.NoError(t, err)
	res, err := Replay(r, Config{Open: openCache, Strategy: "cache", Capacity: capacity, Verify: true})
	require.NoError(t, err)
	return res
}

// TestReplayRelease checks that a release event empties the cache of its
// device's allocator, and only that device's.
func TestReplayRelease(t *testing.T) {
	res := replayText(t, `op,id,size,device
alloc,1,4096,0
alloc,2,4096,1
free,1,,0
free,2,,1
release,,,0
release,,,3
`, 0)
	assert.Equal(t, int64(6), res.Events)
	assert.Equal(t, int64(2), res.Releases)
	require.Len(t, res.Devices, 2)
	assert.Equal(t, int64(1), res.Devices[0].DeviceFrees, "device 0's cache was released")
	assert.Zero(t, res.Devices[0].ReservedBytes)
	assert.Zero(t, res.Devices[1].DeviceFrees, "device 1 keeps its cache")
	assert.Equal(t, int64(4096), res.Devices[1].ReservedBytes)
	assert.Zero(t, res.DeviceFullAllocs, "a release the trace asks for is no sign of a full device")
}

// TestReplayLiveAtEnd checks the count and bytes of allocations left live.
func TestReplayLiveAtEnd(t *testing.T) {
	res := replayText(t, "op,id,size\nalloc,1,100\nalloc,2,200\nalloc,3,400\nfree,2,\n", 0)
	assert.Equal(t, int64(2), res.LiveAtEnd)
	assert.Equal(t, int64(500), res.LiveBytesAtEnd)
	res = replayText(t, "op,id,size\nalloc,1,100\nfree,1,\n", 0)
	assert.Zero(t, res.LiveAtEnd)
	assert.Zero(t, res.LiveBytesAtEnd)
}

// TestReplayDeviceFull checks that an alloc during which the device
// refused memory, and the strategy released its cache and retried, is
// counted; and that a replay on a device large enough counts none.
func TestReplayDeviceFull(t *testing.T) {
	trace := "op,id,size\nalloc,1,4096\nfree,1,\nalloc,2,8192\nfree,2,\nalloc,3,16384\n"
	assert.Zero(t, replayText(t, trace, 1<<20).DeviceFullAllocs)
	res := replayText(t, trace, 16384)
	assert.Zero(t, res.OOMs)
	assert.Equal(t, int64(1), res.DeviceFullAllocs, "alloc 3 found the device full (12 KiB cached) and released the cache")
}
