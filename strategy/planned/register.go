package planned

import (
	"strconv"
	"time"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/internal/param"
)

func init() {
	gpualloc.Register(gpualloc.Strategy{
		Name: name,
		Summary: "STAlloc's plan-guided allocation: the requests of a recurring step at the offsets of a plan (plan.Solve) " +
			"in device memory of its own, the rest in a fallback (pytorch or bestfit); the step learned from the run or a profile file",
		Params: []gpualloc.Param{
			{Name: "profile", Default: Auto, Doc: "auto: learn the step from the requests served (the fallback serves the profiled steps, as STAlloc's profiling iteration runs on PyTorch's allocator); else a trace FILE recorded in a profiling run"},
			{Name: "device", Default: "0", Doc: "the device index whose requests the profile FILE gives (STAlloc too plans each device apart, one plan file each)"},
			{Name: "fallback", Default: "pytorch", Doc: "allocator of the requests the plan does not cover: pytorch (STAlloc's choice) or bestfit"},
			{Name: "time_limit", Default: "1s", Doc: "limit of plan.Solve for one plan (STAlloc plans offline, without one)"},
			{Name: "window", Default: "16", Doc: "events (allocations and frees, with their sizes) that, found once in the step, locate the position in the step, and that must match in a row before a request is served from the plan (ours: STAlloc counts requests from an iteration hook, which a trace has not)"},
			{Name: "min_step", Default: "8", Doc: "fewest requests of a step (ours: a bound on step detection)"},
			{Name: "min_hit", Default: "0.5", Doc: "share of the plan's requests served from it, per step, below which (two steps in a row) the plan is dropped, and learned again once its region is back (ours: STAlloc keeps its plan and falls back request by request)"},
			{Name: "reuse", Default: "true", Doc: "a dropped plan's region (but the weights planned at its bottom) serves requests by best fit before the fallback until it is empty, as STAlloc's dynamic requests use the plan's gaps; false: it goes back to the device once empty"},
			{Name: "min_share", Default: "0.25", Doc: "the least share of the memory in use (the fallback's reserved bytes; with a profile FILE, its peak of live bytes) a step's own peak must be to be planned: a recurring run inside a step, an optimizer's per-layer update, is not the step (ours)"},
			{Name: "max_profile", Default: "1048576", Doc: "most requests recorded while no step is found, after which recording starts afresh (ours: bounds the memory of learning)"},
		},
		New:      open,
		Optional: true,
	})
}

// open builds an Allocator from resolved registry parameters.
func open(b gpualloc.Backend, p *gpualloc.Params) (gpualloc.Allocator, error) {
	r := param.NewReader(p)
	c := Config{
		Profile:    p.Value("profile"),
		Device:     r.Int("device", "must be at most 2147483647"),
		Window:     r.Int("window", "must be from 1 to 1024"),
		MinStep:    r.Int("min_step", "is too large"),
		MaxProfile: r.Int("max_profile", "is too large"),
	}
	if err := r.Err(); err != nil {
		return nil, err
	}
	f, ok := parseFallback(p.Value("fallback"))
	if !ok {
		return nil, p.Errorf("fallback", "must be pytorch or bestfit")
	}
	c.Fallback = f
	d, err := time.ParseDuration(p.Value("time_limit"))
	if err != nil {
		return nil, p.Errorf("time_limit", "want a duration such as 500ms or 2s")
	}
	c.TimeLimit = d
	h, err := strconv.ParseFloat(p.Value("min_hit"), 64)
	if err != nil {
		return nil, p.Errorf("min_hit", "want a number from 0 to 1")
	}
	c.MinHit = h
	sh, err := strconv.ParseFloat(p.Value("min_share"), 64)
	if err != nil {
		return nil, p.Errorf("min_share", "want a number from 0 to 1")
	}
	c.MinShare = sh
	if c.Reuse, err = p.Bool("reuse"); err != nil {
		return nil, err
	}
	return param.Open(New(b, c))
}
