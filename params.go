package gpualloc

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Params are a strategy's parameters, each resolved to its effective value:
// the spec's value if it gives one, else the first set environment variable
// among the parameter's Env, else the default. A Strategy's New reads them
// with the typed getters, whose errors name where a bad value came from.
type Params struct {
	strategy string
	vals     []paramValue
	// chosenBy is where the strategy was chosen (see Source).
	chosenBy string
	// specVar names the environment variable the spec came from, if it
	// did; specText is its value.
	specVar, specText string
	// ignored are the variables set but not read (see IgnoredEnv).
	ignored []string
}

type paramValue struct {
	Param
	value  string
	source string // "" for the default, "spec", or the environment variable's name
	swept  bool   // Expand chose the value among a sweep's
}

// Resolve checks a spec against the registry and gives every parameter of the
// strategy its effective value. getenv looks up environment variables (pass
// os.LookupEnv, or nil to ignore the environment); a variable set to the empty
// string counts as unset. An unknown strategy or key is an error that lists
// what is known.
func Resolve(spec Spec, getenv func(string) (string, bool)) (*Params, error) {
	s, err := Lookup(spec.Name)
	if err != nil {
		return nil, err
	}
	p := &Params{strategy: s.Name, vals: make([]paramValue, len(s.Params))}
	for i, d := range s.Params {
		p.vals[i] = paramValue{Param: d, value: d.Default}
		if getenv == nil {
			continue
		}
		for _, name := range d.Env {
			v, ok := getenv(name)
			if !ok || strings.TrimSpace(v) == "" {
				continue
			}
			if w := p.vals[i].source; w != "" {
				p.ignored = append(p.ignored, fmt.Sprintf("%s=%s is ignored: %s, also set, wins", name, strings.TrimSpace(v), w))
				continue
			}
			p.vals[i].value, p.vals[i].source = strings.TrimSpace(v), name
		}
	}
	for _, kv := range spec.Params {
		v := p.find(kv.Key)
		if v == nil {
			known := make([]string, len(s.Params))
			for i, d := range s.Params {
				known[i] = d.Name
			}
			list := strings.Join(known, ", ")
			if list == "" {
				list = "none"
			}
			return nil, fmt.Errorf("%s: unknown parameter %q (known: %s)", s.Name, kv.Key, list)
		}
		v.value, v.source = kv.Value, "spec"
	}
	return p, nil
}

// FromEnv returns the parameters whose values came from the environment,
// each as "VARIABLE=value", in the strategy's order of parameters.
func (p *Params) FromEnv() []string {
	var out []string
	for _, v := range p.vals {
		if v.source != "" && v.source != "spec" {
			out = append(out, v.source+"="+v.value)
		}
	}
	return out
}

// Explicit reports whether some parameter has a value that the spec or
// the environment gave, not its default.
func (p *Params) Explicit() bool {
	for _, v := range p.vals {
		if v.source != "" {
			return true
		}
	}
	return false
}

// WithDefault returns a copy of p in which parameter key, when it has its
// default value, has value instead, coming from source (the name of a file
// that records it, as a PyTorch snapshot records its allocator's
// settings), which Errorf then names. A value of "auto" that the spec or
// the environment gives counts as the default, as it leaves the choice to
// what is recorded. It returns p itself when key is not a parameter or has
// another value of the spec or the environment.
func (p *Params) WithDefault(key, value, source string) *Params {
	v := p.find(key)
	if v == nil || v.source != "" && v.value != "auto" {
		return p
	}
	q := *p
	q.vals = append([]paramValue(nil), p.vals...)
	w := q.find(key)
	w.value, w.source = value, source
	return &q
}

// IgnoredEnv returns the environment variables that were set but not
// read, because a variable before them in a parameter's Env is set too
// (PYTORCH_ALLOC_CONF when PYTORCH_CUDA_ALLOC_CONF is set), each as a
// sentence for the user: "PYTORCH_ALLOC_CONF=... is ignored:
// PYTORCH_CUDA_ALLOC_CONF, also set, wins". Their values are not checked.
func (p *Params) IgnoredEnv() []string { return slices.Clone(p.ignored) }

// Strategy returns the name of the strategy the parameters belong to.
func (p *Params) Strategy() string { return p.strategy }

// Source says where the strategy was chosen, for Params that [Select]
// returned: "spec" for an explicit spec, the name of the environment
// variable that chose it, or "default"; "spec" for Params from [Resolve].
func (p *Params) Source() string {
	if p.chosenBy == "" {
		return "spec"
	}
	return p.chosenBy
}

// Spec returns the full spec: the strategy's name and every parameter with its
// effective value, in the strategy's order. It is what a result reports.
func (p *Params) Spec() Spec {
	s := Spec{Name: p.strategy}
	for _, v := range p.vals {
		s.Params = append(s.Params, KeyValue{v.Name, v.value})
	}
	return s
}

// Declared returns the strategy's parameters as it registered them, in its
// order (that of Spec's): their defaults, documentation and syntax.
func (p *Params) Declared() []Param {
	out := make([]Param, len(p.vals))
	for i, v := range p.vals {
		out[i] = v.Param
	}
	return out
}

// Swept returns the parameters whose values [Params.Expand] chose among a
// sweep's, in the strategy's order: none for Params that Expand did not
// make from a sweep.
func (p *Params) Swept() []string {
	var out []string
	for _, v := range p.vals {
		if v.swept {
			out = append(out, v.Name)
		}
	}
	return out
}

// String returns p.Spec().String().
func (p *Params) String() string { return p.Spec().String() }

// Open builds the strategy's allocator on b. A [*ParamError] from the
// strategy's New is reported as [Params.Errorf] reports it, naming where the
// parameter's value came from.
func (p *Params) Open(b Backend) (Allocator, error) {
	s, err := Lookup(p.strategy)
	if err != nil {
		return nil, err
	}
	for _, v := range p.vals {
		if v.source != "" && isSweep(v.value) {
			return nil, p.Errorf(v.Name, "a range or list of values names several allocators: open each of Params.Expand")
		}
	}
	a, err := s.New(b, p)
	if pe := (*ParamError)(nil); errors.As(err, &pe) && p.find(pe.Key) != nil {
		return nil, p.Errorf(pe.Key, "%s", pe.Msg)
	}
	return a, err
}

// A ParamError reports a bad value of one parameter. A strategy's
// constructor, which knows nothing of specs or the environment, returns one
// from its validation; [Params.Open] turns it into an error that names the
// spec key or the environment variable the value came from.
type ParamError struct {
	Key string // the parameter, as declared: "cutoff"
	Msg string // what is wrong: "must be from 20 to 34"
}

func (e *ParamError) Error() string { return e.Key + ": " + e.Msg }

func (p *Params) find(key string) *paramValue {
	for i := range p.vals {
		if strings.EqualFold(p.vals[i].Name, key) {
			return &p.vals[i]
		}
	}
	return nil
}

func (p *Params) get(key string) *paramValue {
	v := p.find(key)
	if v == nil {
		panic(fmt.Sprintf("gpualloc: strategy %s reads undeclared parameter %q", p.strategy, key))
	}
	return v
}

// Value returns the effective text of a parameter. It panics if the strategy
// did not declare the key.
func (p *Params) Value(key string) string { return p.get(key).value }

// Errorf returns an error about the parameter key that names where its value
// came from: "round: cutoff=40: ..." for a spec or default value,
// "MXNET_GPU_MEM_POOL_ROUND_LINEAR_CUTOFF=40: ..." for an environment variable.
func (p *Params) Errorf(key, format string, args ...any) error {
	v := p.get(key)
	msg := fmt.Sprintf(format, args...)
	if v.source != "" && v.source != "spec" {
		return fmt.Errorf("%s=%q: %s", v.source, v.value, msg)
	}
	if v.source == "spec" && p.specVar != "" {
		return fmt.Errorf("%s=%q: %s: %s=%s: %s", p.specVar, p.specText, p.strategy, v.Name, v.value, msg)
	}
	return fmt.Errorf("%s: %s=%s: %s", p.strategy, v.Name, v.value, msg)
}

// Size returns a parameter parsed by [ParseSize].
func (p *Params) Size(key string) (int64, error) {
	n, err := ParseSize(p.get(key).value)
	if se := (*sizeError)(nil); errors.As(err, &se) {
		return 0, p.Errorf(key, "not a size: %s", se.Reason)
	} else if err != nil {
		return 0, p.Errorf(key, "not a size: %v", err)
	}
	return n, nil
}

// Int returns a parameter parsed as a decimal integer.
func (p *Params) Int(key string) (int64, error) {
	n, err := strconv.ParseInt(p.get(key).value, 10, 64)
	if err != nil {
		return 0, p.Errorf(key, "not an integer")
	}
	return n, nil
}

// Float returns a parameter parsed as a decimal number.
func (p *Params) Float(key string) (float64, error) {
	f, err := strconv.ParseFloat(p.get(key).value, 64)
	if err != nil {
		return 0, p.Errorf(key, "not a number")
	}
	return f, nil
}

// Bool returns a parameter parsed as true/false (also 1/0, yes/no, on/off).
func (p *Params) Bool(key string) (bool, error) {
	switch strings.ToLower(p.get(key).value) {
	case "true", "1", "yes", "on":
		return true, nil
	case "false", "0", "no", "off":
		return false, nil
	}
	return false, p.Errorf(key, "not a boolean: want true or false")
}
