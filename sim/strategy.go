package sim

import (
	"slices"
	"strings"

	"github.com/gpualloc/gpualloc"
)

// A Strategy is the strategy of a replay as its [Result] reports it: the
// full spec, which the result schema writes (JSON and CSV write a Strategy
// as its Spec), and the same as structure, taken from the strategy's
// resolved parameters when the replay starts, so that whoever reads
// results (a report) neither parses the spec again nor asks the registry
// what the strategy's defaults are.
type Strategy struct {
	// Spec is the full spec, every parameter with its effective value:
	// "round:page=4096,cutoff=20,reserve=5".
	Spec string
	// Name is the strategy's name, the spec up to its colon: "round".
	Name string
	// Params are the strategy's parameters, in its order. From
	// Config.Params (see [StrategyOf]) they have their defaults, what a
	// sweep chose and the settings of a value made of several; from a spec
	// alone (Config.Strategy, an allocator's Spec method, a result read
	// back from JSON) only what the spec says, and none when the spec does
	// not parse as gpualloc.ParseSpec reads one.
	Params []StrategyParam
}

// A StrategyParam is one parameter of a [Strategy].
type StrategyParam struct {
	Key   string `json:"key"`
	Value string `json:"value"` // the effective value
	// Default is the strategy's default for the parameter; "" when it is
	// not known (a strategy known only by its spec).
	Default string `json:"default,omitempty"`
	// Swept says that a sweep chose the value (see gpualloc.Params.Expand).
	Swept bool `json:"swept,omitempty"`
	// Settings are the settings of a value made of several, as the
	// parameter reads them (see gpualloc.Param.Settings): the pytorch
	// strategy's conf "max_split_size_mb:64,expandable_segments:True" holds
	// max_split_size_mb=64 and expandable_segments=True.
	Settings []gpualloc.KeyValue `json:"settings,omitempty"`
}

// StrategyOf returns the strategy that p resolves: its full spec, and every
// parameter with its effective value, its default, whether a sweep chose
// it, and its settings when the parameter reads them.
func StrategyOf(p *gpualloc.Params) Strategy {
	spec := p.Spec()
	s := Strategy{Spec: spec.String(), Name: spec.Name, Params: make([]StrategyParam, len(spec.Params))}
	swept := p.Swept()
	for i, d := range p.Declared() {
		v := spec.Params[i].Value
		sp := StrategyParam{Key: d.Name, Value: v, Default: d.Default, Swept: slices.Contains(swept, d.Name)}
		if d.Settings != nil {
			sp.Settings, _ = d.Settings(v)
		}
		s.Params[i] = sp
	}
	return s
}

// strategyOfSpec returns the strategy that a spec names, with the
// parameters the spec gives when it parses.
func strategyOfSpec(spec string) Strategy {
	s := Strategy{Spec: spec}
	s.Name, _, _ = strings.Cut(spec, ":")
	if sp, err := gpualloc.ParseSpec(spec); err == nil {
		for _, kv := range sp.Params {
			s.Params = append(s.Params, StrategyParam{Key: kv.Key, Value: kv.Value})
		}
	}
	return s
}

// String returns the full spec.
func (s Strategy) String() string { return s.Spec }

// MarshalText returns the full spec: what the result schema's strategy
// field holds.
func (s Strategy) MarshalText() ([]byte, error) { return []byte(s.Spec), nil }

// UnmarshalText reads a full spec back: a Strategy with the parameters the
// spec gives, without their defaults or settings, which the spec does not
// hold.
func (s *Strategy) UnmarshalText(text []byte) error {
	*s = strategyOfSpec(string(text))
	return nil
}
