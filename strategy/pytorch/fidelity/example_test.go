package fidelity_test

import (
	"fmt"

	"github.com/gpualloc/gpualloc/snapshot"
	"github.com/gpualloc/gpualloc/strategy/pytorch/fidelity"
)

// A window of a trace that starts mid-run, where every block is freed by
// the end: a block of 3 MiB was live before it, with 512 KiB that PyTorch
// did not split off, and the block of 4 MiB after it. The trace frees the
// second, allocates 16.5 MiB where it was, and frees all. The rebuild gives
// the first block its tail back (PyTorch leaves no free fragment of 1 MiB or
// less in a large segment), so that the pytorch strategy finds the free
// 16.5 MiB at the address PyTorch used, not 512 KiB lower.
func ExampleRun() {
	const mib = 1 << 20
	const seg = 0x7f0000000000
	e := func(a snapshot.Action, addr uint64, size int64) snapshot.TraceEntry {
		return snapshot.TraceEntry{Action: a, Addr: addr, Size: size, TimeUS: snapshot.NoTime}
	}
	s := snapshot.New([]snapshot.Segment{{Address: seg, TotalSize: 20 * mib, SegmentType: "large",
		Blocks: []snapshot.Block{{Address: seg, Size: 20 * mib, State: snapshot.Inactive}}}}, []snapshot.TraceEntry{
		e(snapshot.FreeCompleted, seg+7*mib/2, 4*mib),
		e(snapshot.Alloc, seg+7*mib/2, 33*mib/2),
		e(snapshot.FreeCompleted, seg+7*mib/2, 33*mib/2),
		e(snapshot.FreeCompleted, seg, 3*mib),
	})
	st, err := s.InitialState(0)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, b := range st.Segments[0].Blocks {
		fmt.Printf("at the start: %s block at +%.1f MiB of %.1f MiB\n", b.State, float64(b.Address-seg)/mib, float64(b.Size)/mib)
	}
	res, err := fidelity.Run(s, "window.pickle", fidelity.Options{New: fidelity.PyTorch})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, r := range res {
		fmt.Printf("device %d: %d of %d addresses, %d of %d decisions, %d blocks live at the start\n",
			r.Device, r.AddressMatches, r.Allocs, r.DecisionMatches, r.Allocs, r.InitialLive)
	}
	// Output:
	// at the start: active_allocated block at +0.0 MiB of 3.5 MiB
	// at the start: active_allocated block at +3.5 MiB of 4.0 MiB
	// at the start: inactive block at +7.5 MiB of 12.5 MiB
	// device 0: 1 of 1 addresses, 1 of 1 decisions, 2 blocks live at the start
}
