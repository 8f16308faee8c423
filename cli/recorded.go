package cli

import (
	"fmt"
	"io"

	"github.com/gpualloc/gpualloc/sim"
)

// noteRecordedSettings writes one line on w for each trace whose recorded
// allocator settings a strategy replayed with, given no parameter of its
// own (see sim.StartReporter): which file they came from, and how to
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
