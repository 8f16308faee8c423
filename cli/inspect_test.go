package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Sums of sizes never wrap: the mean of allocations whose sizes add up past
// 2^63 is exact, and a trace whose live bytes would pass 2^63 is refused at
// its line.
func TestInspectLargeSizes(t *testing.T) {
	dir := t.TempDir()
	seq := filepath.Join(dir, "seq.csv")
	require.NoError(t, os.WriteFile(seq, []byte("op,id,size\nalloc,1,6000000000000000000\nfree,1,\n"+
		"alloc,2,6000000000000000000\nfree,2,\nalloc,3,3\n"), 0o644))
	code, out, errs := run(t, nil, "inspect", "-f", "json", seq)
	require.Equal(t, 0, code, errs)
	var infos []traceInfo
	require.NoError(t, json.Unmarshal([]byte(out), &infos))
	require.Len(t, infos, 1)
	assert.Equal(t, int64(4000000000000000001), infos[0].MeanSize)
	assert.Equal(t, int64(6000000000000000000), infos[0].PeakLiveBytes)

	both := filepath.Join(dir, "both.csv")
	require.NoError(t, os.WriteFile(both, []byte("op,id,size\nalloc,1,6000000000000000000\nalloc,2,6000000000000000000\n"), 0o644))
	code, _, errs = run(t, nil, "inspect", both)
	assert.Equal(t, 1, code)
	assert.Contains(t, errs, "both.csv:3: alloc of id 2 (6000000000000000000 bytes) takes the live bytes past 2^63-1 (8 EiB)")
}
