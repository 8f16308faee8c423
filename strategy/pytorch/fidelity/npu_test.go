package fidelity

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSharedNPU replays the snapshots that torch_npu wrote on Ascend NPUs
// through the pytorch strategy, which chooses torch_npu's rules for them:
// every address, segment taken and given back, and the recorded peak
// reserved bytes and device allocations, on every device.
func TestSharedNPU(t *testing.T) {
	for _, name := range []string{"npu_expandable.pickle", "npu_empty_cache.pickle", "npu_two_devices.pickle"} {
		t.Run(name, func(t *testing.T) {
			s := readShared(t, name)
			require.True(t, s.TorchNPU())
			res, err := Run(s, name, Options{New: PyTorch})
			require.NoError(t, err)
			for _, r := range res {
				t.Logf("device %d (%s): allocs %d/%d decisions %d segments %d/%d frees %d/%d peak %d/%d mallocs %d/%d %v", r.Device, r.Conf,
					r.AddressMatches, r.Allocs, r.DecisionMatches, r.SegmentMatches, r.SegmentAllocs, r.SegmentFreeMatches, r.SegmentFrees,
					r.ReplayedPeakReservedBytes, r.RecordedPeakReservedBytes, r.ReplayedDeviceMallocs, r.RecordedDeviceMallocs, r.Mismatches)
				assert.Contains(t, Models(r.Conf), "torch_npu")
				assert.Empty(t, r.Mismatches)
				assert.Equal(t, r.Allocs, r.AddressMatches)
				assert.Equal(t, r.Allocs, r.DecisionMatches)
				assert.Equal(t, r.SegmentAllocs, r.SegmentMatches)
				assert.Equal(t, r.SegmentFrees, r.SegmentFreeMatches)
				assert.Equal(t, r.RecordedPeakReservedBytes, r.ReplayedPeakReservedBytes)
				assert.Equal(t, r.RecordedDeviceMallocs, r.ReplayedDeviceMallocs)
			}
		})
	}
}
