package sim

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPerDevice(t *testing.T) {
	// Device 0 holds 1000 bytes, then device 1 3000 while device 0 has
	// freed: the trace's lower bound is 3000, each device's its own.
	tb := newTrace().on(0, 0).alloc(1, 1000).free(1).on(1, 0).alloc(2, 3000).alloc(3, 500)
	res, err := Replay(tb.reader(), Config{Open: openExact, Strategy: "exact"})
	require.NoError(t, err)
	rows := res.PerDevice()
	require.Len(t, rows, 3)
	assert.Nil(t, rows[0].Device)
	assert.Equal(t, int64(3500), rows[0].PeakRequestedBytes)
	d0, d1 := rows[1], rows[2]
	assert.Equal(t, 0, *d0.Device)
	assert.Equal(t, 1, *d1.Device)
	assert.Equal(t, [2]int64{2, 2}, [2]int64{d0.Events, d1.Events})
	assert.Equal(t, [2]int64{1000, 3500}, [2]int64{d0.PeakRequestedBytes, d1.PeakRequestedBytes})
	assert.Equal(t, [2]int64{1000, 3500}, [2]int64{d0.PeakReservedBytes, d1.PeakReservedBytes})
	assert.Equal(t, [2]int64{1, 2}, [2]int64{d0.DeviceMallocs, d1.DeviceMallocs})
	assert.Equal(t, 1.0, d1.Overhead)
	assert.Equal(t, res.ElapsedNS, d1.ElapsedNS)
	assert.Nil(t, d1.FreeFragmentation, "not measured per device")

	// One device: the trace's row alone.
	res, err = Replay(newTrace().alloc(1, 10).reader(), Config{Open: openExact, Strategy: "exact"})
	require.NoError(t, err)
	assert.Equal(t, []Result{res}, res.PerDevice())
}
