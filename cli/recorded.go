package cli

import (
	"fmt"
	"io"

	"github.com/gpualloc/gpualloc/sim"
	"github.com/gpualloc/gpualloc/traces"
)

// noteRecordedSettings writes one line on w for each trace whose recorded
// allocator settings a strategy replayed with, given no parameter of its
// own (see traces.Start): which file they came from, and how to
// replay with other settings.
func noteRecordedSettings(w io.Writer, out []sim.JobResult) {
	seen := map[string]bool{}
	for _, o := range out {
		r := o.Result
		if r.SettingsFrom == "" || seen[r.SettingsFrom+"\x00"+r.Strategy.Name] {
			continue
		}
		seen[r.SettingsFrom+"\x00"+r.Strategy.Name] = true
		conf := ""
		for _, p := range r.Strategy.Params {
			if p.Key == "conf" {
				conf = p.Value
			}
		}
		fmt.Fprintf(w, "simulate: %s: %s replays with the allocator settings that it records (%s); a %s parameter or PYTORCH_CUDA_ALLOC_CONF overrides them\n",
			r.SettingsFrom, r.Strategy.Name, conf, r.Strategy.Name)
	}
}

// noteRelease writes one line on w for each trace that a pytorch
// strategy of version auto replayed and whose recording tells the
// release of PyTorch that made it (sim.Result.Release): the release
// inferred and why: auto replays a recording with the rules of the
// release that wrote it (see sim.Config's Params).
func noteRelease(w io.Writer, out []sim.JobResult) {
	seen := map[string]bool{}
	for _, o := range out {
		r := o.Result
		if r.Release == "" || r.Strategy.Name != "pytorch" || seen[r.Trace] {
			continue
		}
		auto := true
		for _, p := range r.Strategy.Params {
			if p.Key == "version" && p.Value != "auto" && p.Value != "" && p.Value != r.Release {
				auto = false
			}
		}
		if !auto {
			continue
		}
		seen[r.Trace] = true
		if r.Release == "torch_npu" {
			fmt.Fprintf(w, "simulate: %s: written by torch_npu: %s\n", r.Trace, r.ReleaseWhy)
			continue
		}
		fmt.Fprintf(w, "simulate: %s: written by PyTorch %s, as inferred from it: %s. pytorch's version=auto replays it as that release would; version=X.Y as another would\n",
			r.Trace, r.Release, r.ReleaseWhy)
	}
}

// writeDeviceMemory records in w the memory of each device that r knows
// (a PyTorch snapshot's, or a native trace's device_memory comments), so
// that the converted trace replays on the same devices.
func writeDeviceMemory(w *traces.Writer, r traces.Reader) error {
	dm, ok := r.(interface{ DeviceMemory() []int64 })
	if !ok {
		return nil
	}
	for d, n := range dm.DeviceMemory() {
		if n > 0 {
			if err := w.DeviceMemory(d, n); err != nil {
				return err
			}
		}
	}
	return nil
}
