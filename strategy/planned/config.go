package planned

import (
	"time"

	"github.com/gpualloc/gpualloc/strategy/internal/param"
)

// name is the strategy's name in the registry and in errors.
const name = "planned"

// Auto is the value of Config.Profile that learns the plan from the
// requests served: the first step that recurs is the profile.
const Auto = "auto"

// Fallback names the allocator that serves the requests the plan does not
// cover.
type Fallback uint8

const (
	// FallbackPyTorch is PyTorch's caching allocator (strategy pytorch),
	// what STAlloc serves its dynamic requests with
	// (Allocator/StaticAllocator.hpp, alloc_fn_: a mismatch calls
	// deviceCachingAllocator_malloc).
	FallbackPyTorch Fallback = iota
	// FallbackBestFit is the best-fit pool (strategy bestfit).
	FallbackBestFit
)

var fallbackNames = []string{"pytorch", "bestfit"}

// String returns the fallback's name in a spec.
func (f Fallback) String() string { return param.Name(fallbackNames, "Fallback", f) }

func parseFallback(s string) (Fallback, bool) { return param.Parse[Fallback](fallbackNames, s) }

// Config are the parameters of a planned allocator.
type Config struct {
	// Profile is Auto or the path of a trace recorded in a profiling run
	// of the same program, in any format the trace readers know.
	Profile string
	// Device is the device index whose requests the profile file gives
	// (each device has its own allocator and its own plan).
	Device int
	// Fallback serves every request the plan does not.
	Fallback Fallback
	// TimeLimit bounds plan.Solve for one plan.
	TimeLimit time.Duration
	// Window is the number of consecutive request sizes that locate a
	// request in the step: a run of Window sizes found once in the step
	// (re)synchronizes the position.
	Window int
	// MinStep is the fewest requests a step may have.
	MinStep int
	// MinHit is the share of the plan's requests that must be served from
	// the plan, over one step, for the plan to be kept; two steps in a row
	// below it drop the plan.
	MinHit float64
	// Reuse makes part 1 of a dropped plan's region (what is not the
	// prefix's buffers that stay) a best-fit pool that serves requests
	// before the fallback, until its last block is freed, as STAlloc
	// lets dynamic requests use the plan's free gaps. Without it, that part
	// goes back to the device as soon as it holds no block, so that the
	// plan never keeps memory the fallback could need.
	Reuse bool
	// MinShare is the least share of the memory in use (the fallback's
	// reserved memory with Profile Auto, the profile's peak of live bytes
	// with a file) that a step's own buffers must peak at for the step to
	// be planned: a short run of requests that recurs inside a step (an
	// optimizer's update of each layer in turn, its temporaries freed at
	// once) is a period too, but not the step.
	MinShare float64
	// MaxProfile is the most requests recorded while no step is found;
	// the recording then starts afresh, so that its memory stays bounded.
	MaxProfile int
}

// DefaultConfig returns the defaults: profile=auto, the pytorch fallback,
// a time limit of one second, a window of 16 events, steps of at least 8
// requests, a hit share of one half, a step share of one quarter, reuse of a dropped plan's region and at most 2^20 requests recorded.
func DefaultConfig() Config {
	return Config{
		Profile:    Auto,
		Fallback:   FallbackPyTorch,
		TimeLimit:  time.Second,
		Window:     16,
		MinStep:    8,
		MinHit:     0.5,
		MinShare:   0.25,
		Reuse:      true,
		MaxProfile: 1 << 20,
	}
}

// validate reports the first parameter out of range.
func (c Config) validate() error {
	bad := func(key string, v any, msg string) error { return param.Error(name, key, v, msg) }
	switch {
	case c.Profile == "":
		return bad("profile", c.Profile, "must be auto or a trace file")
	case c.Device < 0:
		return bad("device", c.Device, "must not be negative")
	case int(c.Fallback) >= len(fallbackNames):
		return bad("fallback", c.Fallback, "must be pytorch or bestfit")
	case c.TimeLimit <= 0:
		return bad("time_limit", c.TimeLimit, "must be positive")
	case c.Window < 1 || c.Window > 1024:
		return bad("window", c.Window, "must be from 1 to 1024")
	case c.MinStep < 1:
		return bad("min_step", c.MinStep, "must be positive")
	case !(c.MinHit >= 0 && c.MinHit <= 1):
		return bad("min_hit", c.MinHit, "must be from 0 to 1")
	case !(c.MinShare >= 0 && c.MinShare <= 1):
		return bad("min_share", c.MinShare, "must be from 0 to 1")
	case c.MaxProfile < 2*c.MinStep:
		return bad("max_profile", c.MaxProfile, "must be at least twice min_step")
	}
	return nil
}
