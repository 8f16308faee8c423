package tlsf_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/sim"
	"github.com/gpualloc/gpualloc/strategy/tlsf"
	"github.com/gpualloc/gpualloc/traces"
	"github.com/gpualloc/gpualloc/traces/gen"
)

// genTrace writes the random workload of traces/gen.
func genTrace(t testing.TB, seed uint64, n int64) []byte {
	var buf bytes.Buffer
	w := traces.NewWriter(&buf, gen.Columns()...)
	require.NoError(t, gen.Generate(w, "random", gen.Options{Events: n, Seed: seed}))
	require.NoError(t, w.Close())
	return buf.Bytes()
}

func reader(t testing.TB, name string, data []byte) traces.FileReader {
	r, err := traces.NewReader(bytes.NewReader(data), name, traces.Options{})
	require.NoError(t, err)
	return r
}

// TestPeakAllocatedIsRoundedPeak checks on independent traces that the peak
// of allocated bytes a replay measures is the peak of live requests rounded
// as Config.RoundSize says: TLSF always splits, so a block's Size is exactly
// the rounded request.
func TestPeakAllocatedIsRoundedPeak(t *testing.T) {
	n := int64(50000)
	if testing.Short() {
		n = 5000
	}
	for _, c := range []tlsf.Config{tlsf.DefaultConfig(), {Round: 256, MinBlock: 1024, Chunk: 1}} {
		for seed := uint64(1); seed <= 3; seed++ {
			t.Run(fmt.Sprintf("round=%d,min_block=%d,chunk=%d,seed=%d", c.Round, c.MinBlock, c.Chunk, seed), func(t *testing.T) {
				data := genTrace(t, seed, n)
				r := reader(t, "random", data)
				var sum, want int64
				for r.Scan() {
					ev := r.Event()
					size := max(c.MinBlock, (ev.Size+c.Round-1)/c.Round*c.Round)
					if ev.Op == traces.OpAlloc {
						sum += size
						want = max(want, sum)
					} else {
						sum -= size
					}
				}
				require.NoError(t, r.Err())
				res, err := sim.Replay(reader(t, "random", data), sim.Config{
					Open:          func(b gpualloc.Backend) (gpualloc.Allocator, error) { return tlsf.New(b, c) },
					SeriesBuckets: -1,
					Verify:        true,
				})
				require.NoError(t, err)
				require.Zero(t, res.OOMs)
				assert.Equal(t, want, res.PeakAllocatedBytes)
			})
		}
	}
}
