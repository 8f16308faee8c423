package sim_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/sim"
	"github.com/gpualloc/gpualloc/traces"
)

const badTrace = `op,id,size,device
alloc,1,4096,0
free,7,,0
alloc,2,100,1
free,1,,0
free,2,,1
`

func TestReplayCSVReader(t *testing.T) {
	cfg := sim.Config{
		Strategy: "pages",
		Open:     func(b gpualloc.Backend) (gpualloc.Allocator, error) { return pages{b}, nil },
	}

	r, err := traces.NewReader(strings.NewReader(badTrace), "bad.csv", traces.Options{Lenient: true})
	require.NoError(t, err)
	res, err := sim.Replay(r, cfg)
	require.NoError(t, err)
	assert.Equal(t, "bad.csv", res.Trace, "the reader's name")
	assert.Equal(t, int64(1), res.Skipped, "the lenient reader's count")
	assert.Equal(t, int64(4), res.Events)
	assert.Equal(t, int64(4096+4096), res.PeakReservedBytes)
	require.Len(t, res.Devices, 2)

	r, err = traces.NewReader(strings.NewReader(badTrace), "bad.csv", traces.Options{})
	require.NoError(t, err)
	res, err = sim.Replay(r, cfg)
	require.Error(t, err)
	assert.True(t, strings.HasPrefix(err.Error(), "bad.csv:3: "), "the reader's error as it is: %v", err)
	assert.Equal(t, int64(1), res.Events)
}
