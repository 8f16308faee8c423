package diff

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/parquet-go/parquet-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc/dataset"
	"github.com/gpualloc/gpualloc/explain"
)

// TestWriteEvents writes the events of a generated run and reads them
// back: a row per event, the sites of allocs and their frees, the live
// bytes recounted, and the reserved bytes' largest value the run's peak.
func TestWriteEvents(t *testing.T) {
	tr := loadTrace(t, "a.pickle", genSnapshot(0, program([]genOp{{Site: "model.py:40 extra", Size: 6 * mib}}, 16*mib, 20), ""), false)
	run, rows := writeEvents(t, tr)
	var live, peak int64
	site := map[uint64]string{}
	for i, r := range rows {
		ev := &tr.Events[i]
		assert.EqualValues(t, i, r.Index)
		assert.Equal(t, ev.Op.String(), r.Action)
		assert.Equal(t, run.Strategy, r.Strategy)
		switch r.Action {
		case "alloc":
			live += r.Size
			assert.NotEmpty(t, r.Site)
			site[r.Address] = r.Site
		case "free":
			live -= r.Size
			assert.Equal(t, site[r.Address], r.Site, "a free has its allocation's site")
		}
		assert.Equal(t, live, r.Live)
		assert.NotEqual(t, int64(-1), r.TimeUS)
		peak = max(peak, r.Reserved)
	}
	assert.Equal(t, run.Devices[0].PeakReservedBytes, peak)
	found := false
	for _, r := range rows {
		found = found || r.Site == "model.py:40 extra" && r.Size == 6*mib && r.Action == "alloc"
	}
	assert.True(t, found, "the extra allocation's row")
}

// TestWriteEventsDevices writes the events of a trace of two devices: each
// row's allocated and reserved bytes are its own device's, never the
// devices' sum, and each device's largest reserved value is its peak.
func TestWriteEventsDevices(t *testing.T) {
	csv := "op,id,size,device\n" +
		"alloc,1,1048576,0\n" +
		"alloc,2,3145728,1\n" +
		"alloc,3,2097152,0\n" +
		"free,1,,0\n" +
		"alloc,4,1048576,1\n" +
		"free,2,,1\n"
	run, rows := writeEvents(t, loadTrace(t, "two.csv", []byte(csv), false))
	// Each row's index and live bytes are its device's, as simulate
	// --parquet writes them.
	var index []int64
	var live []int64
	for _, r := range rows {
		index = append(index, r.Index)
		live = append(live, r.Live)
	}
	assert.Equal(t, []int64{0, 0, 1, 2, 1, 2}, index)
	assert.Equal(t, []int64{1 << 20, 3 << 20, 3 << 20, 2 << 20, 4 << 20, 1 << 20}, live)
	peak := map[int32]int64{}
	for _, r := range rows {
		assert.GreaterOrEqual(t, r.Allocated, r.Live, "row %d", r.Index)
		assert.GreaterOrEqual(t, r.Reserved, r.Allocated, "row %d", r.Index)
		peak[r.Device] = max(peak[r.Device], r.Reserved)
	}
	require.Len(t, run.Devices, 2)
	for _, d := range run.Devices {
		assert.Equal(t, d.PeakReservedBytes, peak[int32(d.Device)], "device %d", d.Device)
	}
}

// writeEvents measures tr as it ran, writes its events.parquet and reads
// the rows back, one for each event.
func writeEvents(t *testing.T, tr *explain.Trace) (*Run, []dataset.Event) {
	t.Helper()
	ctx := context.Background()
	run, err := Measure(ctx, tr, Options{})
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "events.parquet")
	w, err := dataset.CreateEvents(path)
	require.NoError(t, err)
	require.NoError(t, WriteEvents(ctx, w, tr, run, Options{}))
	require.NoError(t, w.Close())
	rows, err := parquet.ReadFile[dataset.Event](path)
	require.NoError(t, err)
	require.Len(t, rows, len(tr.Events))
	return run, rows
}
