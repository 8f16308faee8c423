package cli

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/backend/virtual"
	"github.com/gpualloc/gpualloc/sim"
	"github.com/gpualloc/gpualloc/strategy/pytorch"
)

// chosenStrategies are the strategies of a replay, each opened once
// before any replay: those that refused their parameters, and the release
// of PyTorch that each pytorch strategy follows.
type chosenStrategies struct {
	all     []*gpualloc.Params
	refused map[*gpualloc.Params]error // why a variant refused its parameters
	// releases is the release of each pytorch strategy that opened, by
	// its String; the zero Version for version=auto.
	releases map[string]pytorch.Version
}

// open opens each strategy on a virtual device of capacity, and keeps
// the releases, and the refusals of the variants of a sweep whose swept
// values are valid on their own (pytorch:version=2.0 of
// pytorch:version=2.0..2.11, which refuses a setting given to every
// release): such a variant is not replayed but has a row that says why
// (see refusedRows). Any other refusal is bad usage, with its line, as is
// a run whose every strategy refuses, with the first one's.
func (ch *chosenStrategies) open(capacity int64) error {
	ch.refused, ch.releases = map[*gpualloc.Params]error{}, map[string]pytorch.Version{}
	var first error
	for _, p := range ch.all {
		a, err := openOn(p, capacity)
		if err != nil {
			if !validAlone(p, capacity) {
				return usagef("%v", err)
			}
			ch.refused[p] = err
			if first == nil {
				first = err
			}
			continue
		}
		if pa, ok := a.(*pytorch.Allocator); ok {
			ch.releases[p.String()] = pa.Config().Version
		}
	}
	if first != nil && len(ch.refused) == len(ch.all) {
		return usagef("%v", first)
	}
	return nil
}

// openOn opens p on a virtual device of capacity.
func openOn(p *gpualloc.Params, capacity int64) (gpualloc.Allocator, error) {
	dev, err := virtual.New(virtual.Options{Capacity: capacity})
	if err != nil {
		return nil, err
	}
	return p.Open(dev)
}

// validAlone reports whether p is a variant of a sweep whose swept
// values, the others at their defaults and without the environment, make
// a strategy that opens: its refusal then comes from what it shares with
// the other variants, not from a value the sweep gave it.
func validAlone(p *gpualloc.Params, capacity int64) bool {
	swept := p.Swept()
	if len(swept) == 0 {
		return false
	}
	sp := gpualloc.Spec{Name: p.Strategy()}
	for _, k := range swept {
		sp.Params = append(sp.Params, gpualloc.KeyValue{Key: k, Value: p.Value(k)})
	}
	q, err := gpualloc.Resolve(sp, nil)
	if err != nil {
		return false
	}
	_, err = openOn(q, capacity)
	return err == nil
}

// releasesOf returns the releases that the pytorch strategies among
// variants follow (the zero Version for version=auto), without
// repeats.
func (ch *chosenStrategies) releasesOf(variants []*gpualloc.Params) []pytorch.Version {
	var out []pytorch.Version
	for _, p := range variants {
		if v, ok := ch.releases[p.String()]; ok && !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out
}

// envConfNote says what the variable kv ("NAME=value") did to the
// parameters of strategy, whose variants follow releases of PyTorch: it
// set them, except where kv is PYTORCH_ALLOC_CONF and a release does not
// read it (before 2.10, pytorch/pytorch#183387), as the pytorch strategy
// does: its replay takes none of PyTorch's settings from it.
func envConfNote(kv, strategy string, releases []pytorch.Version) string {
	set := kv + " set " + strategy + "'s parameters"
	if !strings.HasPrefix(kv, pytorch.EnvConf+"=") {
		return set
	}
	var reads, not []pytorch.Version
	for _, v := range releases {
		if v.ReadsEnvConf() {
			reads = append(reads, v)
		} else {
			not = append(not, v)
		}
	}
	if len(not) == 0 {
		return set
	}
	verb := "does"
	if len(not) > 1 {
		verb = "do"
	}
	ignored := fmt.Sprintf("PyTorch %s %s not read %s (its CUDA allocator reads it from 2.10, pytorch/pytorch#183387), and the replay ignores the PyTorch settings it gives, as PyTorch would; %s sets them in every release",
		releaseList(not), verb, pytorch.EnvConf, pytorch.EnvCUDAConf)
	if len(reads) == 0 {
		return kv + ": " + ignored
	}
	return set + " under PyTorch " + releaseList(reads) + "; " + ignored
}

// releaseList writes releases in order, runs of consecutive ones as
// "2.1 to 2.9": "2.1 to 2.9", "2.5 and 2.9", "2.1, 2.5 and 2.8 to 2.9".
func releaseList(vs []pytorch.Version) string {
	all := pytorch.Versions()
	idx := make([]int, len(vs))
	for i, v := range vs {
		idx[i] = slices.Index(all, v)
		if v == (pytorch.Version{}) {
			idx[i] = len(all) - 1
		}
	}
	slices.Sort(idx)
	idx = slices.Compact(idx)
	var parts []string
	for i := 0; i < len(idx); {
		j := i
		for j+1 < len(idx) && idx[j+1] == idx[j]+1 {
			j++
		}
		switch {
		case j == i:
			parts = append(parts, all[idx[i]].String())
		case j == i+1:
			parts = append(parts, all[idx[i]].String(), all[idx[j]].String())
		default:
			parts = append(parts, all[idx[i]].String()+" to "+all[idx[j]].String())
		}
		i = j + 1
	}
	if len(parts) < 2 {
		return strings.Join(parts, "")
	}
	return strings.Join(parts[:len(parts)-1], ", ") + " and " + parts[len(parts)-1]
}

// noteEnvConfAuto writes a line on w for each trace that a pytorch
// strategy of version=auto replayed while PYTORCH_ALLOC_CONF was set and
// the trace says a release before 2.10 wrote it (sim.Result.Release):
// version=auto replays it with that release's rules, which take none of
// PyTorch's settings from that variable, though the line before the
// replay said it set them for the releases that read it.
func (p *replayPlan) noteEnvConfAuto(w io.Writer, out []sim.JobResult) {
	seen := map[string]bool{}
	for i, o := range out {
		r, params := o.Result, p.jobs[i].Config.Params
		if o.Err != nil || r.Release == "" || seen[r.Trace] || params == nil {
			continue
		}
		v, ok := p.chosen.releases[params.String()]
		if !ok || v != (pytorch.Version{}) {
			continue // not pytorch, or a release that the spec or conf names
		}
		wrote, err := pytorch.ParseVersion(r.Release)
		if err != nil || wrote.ReadsEnvConf() {
			continue // torch_npu's, or a release that reads it
		}
		for _, kv := range params.FromEnv() {
			if strings.HasPrefix(kv, pytorch.EnvConf+"=") {
				seen[r.Trace] = true
				fmt.Fprintf(w, "simulate: %s: PyTorch %s, which wrote it, does not read %s (pytorch/pytorch#183387): version=auto replays it as PyTorch %s would, without the settings of %s; -s pytorch:version=%s replays with them, and %s sets them in every release\n",
					r.Trace, wrote, pytorch.EnvConf, wrote, kv, pytorch.Newest(), pytorch.EnvCUDAConf)
			}
		}
	}
}
