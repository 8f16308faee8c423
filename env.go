package gpualloc

import (
	"fmt"
	"os"
	"strings"
)

// What chooses a strategy when no explicit spec does: two environment
// variables, in order of precedence, and the default when neither is set.
const (
	EnvPoolType      = "GPUALLOC_POOL_TYPE"      // a full spec: "round:cutoff=20"
	EnvMXNetPoolType = "MXNET_GPU_MEM_POOL_TYPE" // a strategy name: Naive, Round, Unpooled
	DefaultStrategy  = "naive"                   // MXNet's default pool
)

// Select chooses a strategy by precedence: an explicit spec (if not empty),
// then GPUALLOC_POOL_TYPE, then MXNET_GPU_MEM_POOL_TYPE, then "naive"; the
// Params' Source method says which chose it. The parameters are then
// resolved as [Resolve] does, so MXNet's variables such as
// MXNET_GPU_MEM_POOL_PAGE_SIZE supply defaults. A bad value is an error
// naming the variable and the value; there is no silent fallback.
// getenv is os.LookupEnv or a stand-in, or nil for the defaults alone.
//
// With a spec, Select is the common way to go from the text a user wrote
// to a strategy's parameters, which open an allocator ([Params.Open]),
// expand a sweep ([Params.Expand]) or configure a replay (sim.Config's
// Params).
func Select(explicit string, getenv func(string) (string, bool)) (*Params, error) {
	lookup := func(name string) string {
		if getenv == nil {
			return ""
		}
		v, _ := getenv(name)
		return strings.TrimSpace(v)
	}
	var spec Spec
	var source string
	switch {
	case strings.TrimSpace(explicit) != "":
		sp, err := ParseSpec(explicit)
		if err != nil {
			return nil, err
		}
		spec, source = sp, "spec"
	case lookup(EnvPoolType) != "":
		v := lookup(EnvPoolType)
		sp, err := ParseSpec(v)
		if err != nil {
			return nil, fmt.Errorf("%s=%q: %v", EnvPoolType, v, err)
		}
		spec, source = sp, EnvPoolType
	case lookup(EnvMXNetPoolType) != "":
		v := lookup(EnvMXNetPoolType)
		if strings.ContainsAny(v, ":,=") {
			return nil, fmt.Errorf("%s=%q: want a strategy name such as Naive, Round or Unpooled (use %s for parameters)", EnvMXNetPoolType, v, EnvPoolType)
		}
		spec, source = Spec{Name: v}, EnvMXNetPoolType
	default:
		spec, source = Spec{Name: DefaultStrategy}, "default"
	}
	p, err := Resolve(spec, getenv)
	if err != nil {
		if source != "spec" && source != "default" {
			return nil, fmt.Errorf("%s=%q: %v", source, lookup(source), err)
		}
		return nil, err
	}
	p.chosenBy = source
	if source == EnvPoolType {
		p.specVar, p.specText = source, lookup(source)
	}
	return p, nil
}

// Open builds the allocator a spec names, on b. The environment supplies
// defaults for parameters the spec leaves out (MXNet's variables for its
// pools, for example).
func Open(spec string, b Backend) (Allocator, error) {
	sp, err := ParseSpec(spec)
	if err != nil {
		return nil, err
	}
	p, err := Resolve(sp, os.LookupEnv)
	if err != nil {
		return nil, err
	}
	return p.Open(b)
}

// FromEnv builds the allocator the environment chooses, on b:
// GPUALLOC_POOL_TYPE, else MXNET_GPU_MEM_POOL_TYPE, else naive. It is the
// one call a program makes to let its users pick the strategy.
func FromEnv(b Backend) (Allocator, error) {
	p, err := Select("", os.LookupEnv)
	if err != nil {
		return nil, err
	}
	return p.Open(b)
}
