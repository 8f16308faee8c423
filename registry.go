package gpualloc

import (
	"fmt"
	"slices"
	"strings"
	"sync"
)

// A Strategy describes an allocation strategy for the registry: its name,
// its parameters with their defaults, and how to build one.
type Strategy struct {
	Name    string  // registry name, lower case: "round"
	Summary string  // one line: the policy and where it comes from
	Params  []Param // every parameter the strategy takes, in the order shown
	// New builds an allocator on b with the parameters p, every one of them
	// resolved to its effective value. It reports a bad value with p.Errorf,
	// which names where the value came from.
	New func(b Backend, p *Params) (Allocator, error)
	// Optional leaves the strategy out of the comparison a program makes
	// when no strategy is named: one whose figures depend on an input of
	// its own (a profile) or repeat another's.
	Optional bool
}

// A Param documents one parameter of a [Strategy].
type Param struct {
	Name    string   // key in a spec: "cutoff"
	Default string   // value when neither the spec nor the environment gives one
	Doc     string   // one line
	Env     []string // environment variables that supply the default, first set wins
	// Settings, if not nil, reads a value made of named settings in a
	// syntax of the strategy's own, as the pytorch strategy's conf holds
	// PyTorch's "max_split_size_mb:128,expandable_segments:True". It
	// returns the value's settings in order, each key with its value, and
	// with, which writes the value back with other values of its settings
	// (values[i] for settings[i]; a setting given its own value keeps its
	// text). A sweep then varies the settings one by one (see
	// [Params.Expand]), and results show each setting as a parameter of
	// its own. The registry knows no syntax but this one: every other
	// value is one value.
	Settings func(value string) (settings []KeyValue, with func(values []string) string)
}

var (
	registryMu sync.RWMutex
	registry   = map[string]*Strategy{}
)

// Register makes a strategy available by name. It panics if the name is empty,
// not lower case or already registered, if New is nil, or if a parameter is
// unnamed or named twice, since each is a programming error. Strategy packages
// call it from init.
func Register(s Strategy) {
	if s.Name == "" || s.Name != strings.ToLower(s.Name) || strings.ContainsAny(s.Name, ":,= ") {
		panic(fmt.Sprintf("gpualloc: Register: bad strategy name %q", s.Name))
	}
	if s.New == nil {
		panic("gpualloc: Register: nil New for strategy " + s.Name)
	}
	seen := map[string]bool{}
	for _, p := range s.Params {
		if p.Name == "" || seen[p.Name] {
			panic(fmt.Sprintf("gpualloc: Register: strategy %s: bad or repeated parameter %q", s.Name, p.Name))
		}
		seen[p.Name] = true
	}
	registryMu.Lock()
	defer registryMu.Unlock()
	if _, dup := registry[s.Name]; dup {
		panic("gpualloc: Register called twice for strategy " + s.Name)
	}
	s.Params = slices.Clone(s.Params)
	registry[s.Name] = &s
}

// Names returns the names of the registered strategies, sorted.
func Names() []string {
	registryMu.RLock()
	defer registryMu.RUnlock()
	names := make([]string, 0, len(registry))
	for n := range registry {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Lookup returns the strategy registered under name, matched without regard
// to case. Its error lists the known names.
func Lookup(name string) (Strategy, error) {
	registryMu.RLock()
	s, ok := registry[strings.ToLower(strings.TrimSpace(name))]
	registryMu.RUnlock()
	if !ok {
		known := Names()
		if len(known) == 0 {
			// As database/sql says "forgotten import?": strategies
			// register themselves when their package is imported.
			return Strategy{}, fmt.Errorf("unknown strategy %q: no strategy is registered (forgotten import? "+
				`import _ "github.com/gpualloc/gpualloc/strategy/all" registers the built-in ones)`, name)
		}
		return Strategy{}, fmt.Errorf("unknown strategy %q (known: %s)", name, strings.Join(known, ", "))
	}
	return *s, nil
}
