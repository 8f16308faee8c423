package bfc

import (
	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/internal/param"
)

// auto is the value of allow_growth and preallocate when neither the spec
// nor the environment gives one: each is then the opposite of the other,
// and growth is on if both are auto.
const auto = "auto"

func init() {
	gpualloc.Register(gpualloc.Strategy{
		Name: name,
		Summary: "TensorFlow's (and XLA/JAX's) BFC allocator, rule for rule: 256-byte rounding, 21 power-of-two bins of free chunks by (size, address), " +
			"best fit, split when the chunk is twice the request or wastes 128 MiB, coalescing within a region, regions of the whole limit or growing from 2 MiB by doubling, " +
			"free regions returned to the device when it cannot grow",
		Params: []gpualloc.Param{
			{
				Name: "allow_growth", Default: auto, Env: []string{"TF_FORCE_GPU_ALLOW_GROWTH"},
				Doc: "true: regions grow from 2 MiB, doubling; false: the first region is the whole memory limit (TensorFlow's default); " +
					"auto: the opposite of preallocate if that is set, else true. Exactly true or false, as TensorFlow reads its variable",
			},
			{
				Name: "preallocate", Default: auto, Env: []string{"XLA_PYTHON_CLIENT_PREALLOCATE"},
				Doc: "JAX's name for the opposite of allow_growth (JAX's default is true); true, True, 1, false, False or 0, or auto: the opposite of allow_growth",
			},
			{
				Name: "memory_fraction", Default: "1", Env: []string{"XLA_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_MEM_FRACTION"},
				Doc: "memory limit as a fraction of the device's total, more than 0 and at most 1 (TensorFlow's per_process_gpu_memory_fraction; JAX's default is 0.75)",
			},
			{
				Name: "memory_limit", Default: "0",
				Doc: "memory limit in bytes, instead of memory_fraction (0: use memory_fraction)",
			},
			{
				Name: "garbage_collection", Default: "true", Env: []string{"TF_ENABLE_GPU_GARBAGE_COLLECTION"},
				Doc: "when no region can be added, return the entirely free regions to the device and try again (TensorFlow's GPU default true, XLA's false); exactly true or false",
			},
			{
				Name: "fragmentation_fraction", Default: "0",
				Doc: "a chunk is split when twice the request, or when the rest is at least this fraction of the memory limit, from 0 to 1 (0: 128 MiB)",
			},
		},
		New: open,
	})
}

// open builds a Pool from resolved registry parameters.
func open(b gpualloc.Backend, p *gpualloc.Params) (gpualloc.Allocator, error) {
	c := Config{}
	growth, err := parseTF(p, "allow_growth", true)
	if err != nil {
		return nil, err
	}
	prealloc, err := parseJAX(p, "preallocate")
	if err != nil {
		return nil, err
	}
	switch {
	case growth == auto && prealloc == auto:
		c.AllowGrowth = true
	case prealloc == auto:
		c.AllowGrowth = growth == "true"
	case growth == auto:
		c.AllowGrowth = prealloc == "false"
	case (growth == "true") == (prealloc == "true"):
		return nil, p.Errorf("preallocate", "contradicts allow_growth=%s: preallocate is the opposite of allow_growth", growth)
	default:
		c.AllowGrowth = growth == "true"
	}
	gc, err := parseTF(p, "garbage_collection", false)
	if err != nil {
		return nil, err
	}
	c.GarbageCollection = gc == "true"
	if c.MemoryFraction, err = p.Float("memory_fraction"); err != nil {
		return nil, err
	}
	if c.MemoryLimit, err = p.Size("memory_limit"); err != nil {
		return nil, err
	}
	if c.FragmentationFraction, err = p.Float("fragmentation_fraction"); err != nil {
		return nil, err
	}
	return param.Open(New(b, c))
}

// parseTF reads a boolean parameter as TensorFlow reads its variables
// (GetAllowGrowthValue, GetGarbageCollectionValue): exactly "true" or
// "false", and also "auto" if orAuto. TensorFlow logs any other value and
// ignores it; here it is an error.
func parseTF(p *gpualloc.Params, key string, orAuto bool) (string, error) {
	switch v := p.Value(key); {
	case v == "true", v == "false", orAuto && v == auto:
		return v, nil
	case orAuto:
		return "", p.Errorf(key, "want true, false or auto (TensorFlow reads exactly true or false)")
	}
	return "", p.Errorf(key, "want true or false (TensorFlow reads exactly these)")
}

// parseJAX reads preallocate as JAX reads XLA_PYTHON_CLIENT_PREALLOCATE,
// returning "true", "false" or "auto". JAX takes "false", "False" and "0"
// as false and anything else as true (some versions lower-case the value
// first); here only "true", "True" and "1" are true, and any other value is
// an error.
func parseJAX(p *gpualloc.Params, key string) (string, error) {
	switch p.Value(key) {
	case "false", "False", "0":
		return "false", nil
	case "true", "True", "1":
		return "true", nil
	case auto:
		return auto, nil
	}
	return "", p.Errorf(key, "want true, True, 1, false, False, 0 or auto, as JAX reads them")
}
