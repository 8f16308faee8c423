package sim_test

import (
	"strings"
	"testing"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/devicecost"
	"github.com/gpualloc/gpualloc/sim"
	"github.com/gpualloc/gpualloc/traces"
)

// costs is a table in which each call costs the same at every size: a
// device allocation (Malloc or Create) 7 ns, a device free (Free or
// Release) 11, a Map 13 (cuMemMap 6 and cuMemSetAccess 7), an Unmap 17,
// and reserving address space nothing.
const costs = `call,size_bytes,ns
cuMemAlloc,1,7
cuMemCreate,1,7
cuMemFree,1,11
cuMemRelease,1,11
cuMemMap,1,6
cuMemSetAccess,1,7
cuMemUnmap,1,17
cuMemAddressReserve,1,0
cuMemAddressFree,1,0
`

// TestDeviceTimeEstimate checks device_time_ns_est against the device
// calls a replay reports, for every strategy (expandable segments too), on
// a device small enough that strategies give memory back.
func TestDeviceTimeEstimate(t *testing.T) {
	m, err := devicecost.Parse(strings.NewReader(costs))
	if err != nil {
		t.Fatal(err)
	}
	bt, ok := traces.LookupBundled("training")
	if !ok {
		t.Fatal("no bundled trace training")
	}
	specs := append(gpualloc.Names(), "pytorch:expandable_segments=true")
	for _, spec := range specs {
		sp, err := gpualloc.ParseSpec(spec)
		if err != nil {
			t.Fatal(err)
		}
		params, err := gpualloc.Resolve(sp, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, capacity := range []int64{0, 4 << 30, 3 << 30} { // 3 GiB: gmlake releases and unmaps
			r, err := bt.Open()
			if err != nil {
				t.Fatal(err)
			}
			res, err := sim.Replay(r, sim.Config{Params: params, Capacity: capacity, DeviceCosts: m, SeriesBuckets: -1})
			if err != nil {
				t.Fatal(err)
			}
			want := 7*res.DeviceMallocs + 11*res.DeviceFrees + 13*res.DeviceMaps + 17*res.DeviceUnmaps
			if res.DeviceTimeNSEst != want {
				t.Errorf("%s on %d bytes: device_time_ns_est = %d, want %d (%d mallocs, %d frees, %d maps, %d unmaps)",
					spec, capacity, res.DeviceTimeNSEst, want, res.DeviceMallocs, res.DeviceFrees, res.DeviceMaps, res.DeviceUnmaps)
			}
			var sum int64
			for _, d := range res.Devices {
				sum += d.DeviceTimeNSEst
			}
			if sum != res.DeviceTimeNSEst {
				t.Errorf("%s: devices' estimates add up to %d, the row's is %d", spec, sum, res.DeviceTimeNSEst)
			}
		}
	}
}
