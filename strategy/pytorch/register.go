package pytorch

import (
	"errors"
	"strings"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/snapshot"
	"github.com/gpualloc/gpualloc/strategy/internal/param"
)

// auto is the value of a setting the spec leaves to PYTORCH_ALLOC_CONF or
// PYTORCH_CUDA_ALLOC_CONF (the conf parameter) or, failing that, to
// PyTorch's default.
const auto = "auto"

// settings are the parameters that conf can also give, in spec order.
var settings = []string{
	"max_split_size_mb", "roundup_power2_divisions", "garbage_collection_threshold",
	"expandable_segments", "max_non_split_rounding_mb", "memory_fraction", "device", "version",
}

// confEnv are the variables that give the conf parameter, the first set
// winning, in the order of the CUDA allocator of PyTorch 2.10 and later
// (see [EnvConf]): PYTORCH_CUDA_ALLOC_CONF, then PYTORCH_ALLOC_CONF. A
// release before 2.10 does not read the second at all: open keeps only the
// strategy's own items (version, device, deviceN.key, memory_fraction) of
// a conf that came from it.
var confEnv = []string{EnvCUDAConf, EnvConf}

func init() {
	gpualloc.Register(gpualloc.Strategy{
		Name:    name,
		Summary: "PyTorch's CUDA caching allocator, rule for rule: per-stream small and large pools, best fit on (size, address), PyTorch's rounding, splitting, segment sizes and release-and-retry",
		Params: []gpualloc.Param{
			{Name: "conf", Default: "none", Env: confEnv, Settings: confSettings,
				Doc: "settings in the syntax of PYTORCH_CUDA_ALLOC_CONF (max_split_size_mb:128,...), read first; the parameters below override them (releases before 2.10 take no PyTorch setting from PYTORCH_ALLOC_CONF)"},
			{Name: "max_split_size_mb", Default: auto, Doc: "blocks this large (MiB, at least 20) are never split (unlimited or inf: no limit; auto: from conf, else unlimited)"},
			{Name: "roundup_power2_divisions", Default: auto, Doc: "divisions per power of two when rounding: one number, or MiB:divisions entries separated by ';' as 256:1;512:2;>:8 (auto: from conf, else none)"},
			{Name: "garbage_collection_threshold", Default: auto, Doc: "with memory_fraction, free old cached segments when reserved memory exceeds this fraction of the cap (auto: from conf, else off)"},
			{Name: "expandable_segments", Default: auto, Doc: "one growing virtual range per stream and pool, mapped in 2 MiB or 20 MiB pages (auto: from conf, else false)"},
			{Name: "max_non_split_rounding_mb", Default: auto, Doc: "a request of at least max_split_size_mb is not served from a block this many MiB larger (auto: from conf, else 20)"},
			{Name: "memory_fraction", Default: auto, Doc: "cap reserved memory at this fraction of the device, as torch.cuda.set_per_process_memory_fraction (auto: from conf, else no cap)"},
			{Name: "version", Default: auto, Doc: "the PyTorch release whose allocator rules apply, 2.0 to 2.11, e.g. 2.5 (auto: from conf, else the release that wrote the snapshot being replayed, else the newest)"},
			{Name: "device", Default: auto, Doc: "the allocator: cuda, PyTorch's, or npu, torch_npu's for Ascend NPUs, which pads each request by 32 bytes and aligns large blocks of expandable segments to 16 KiB (auto: from conf, which a snapshot written by torch_npu sets, else cuda)"},
		},
		New: open,
	})
}

// open builds an Allocator from resolved registry parameters.
func open(b gpualloc.Backend, p *gpualloc.Params) (gpualloc.Allocator, error) {
	c := DefaultConfig()
	if conf := p.Value("conf"); conf != "none" {
		if err := c.apply(conf, deviceIndex(b)); err != nil {
			return nil, p.Errorf("conf", "%s", err)
		}
		if fromEnvConf(p) && !releaseOf(c, p).ReadsEnvConf() {
			// PyTorch before 2.10 takes none of its settings from
			// PYTORCH_ALLOC_CONF (pytorch/pytorch#183387).
			c = DefaultConfig()
			if err := c.apply(ownItems(conf), deviceIndex(b)); err != nil {
				return nil, p.Errorf("conf", "%s", err)
			}
		}
	}
	for _, k := range settings {
		v := p.Value(k)
		if v == auto {
			continue
		}
		if err := c.set(k, v); err != nil {
			var pe *gpualloc.ParamError
			if errors.As(err, &pe) {
				return nil, p.Errorf(k, "%s", pe.Msg)
			}
			return nil, err
		}
	}
	return param.Open(New(b, c))
}

// fromEnvConf reports whether the conf parameter came from
// PYTORCH_ALLOC_CONF.
func fromEnvConf(p *gpualloc.Params) bool {
	for _, kv := range p.FromEnv() {
		if strings.HasPrefix(kv, EnvConf+"=") {
			return true
		}
	}
	return false
}

// releaseOf returns the release that the version parameter names, else
// the one c (read from the conf) has.
func releaseOf(c Config, p *gpualloc.Params) Version {
	if v := p.Value("version"); v != auto {
		if ver, err := ParseVersion(v); err == nil {
			return ver
		}
	}
	return c.Version
}

// ownItems returns the items of conf that are the strategy's own, not
// PyTorch's: version, device, deviceN.key and memory_fraction.
func ownItems(conf string) string {
	var kept []string
	for _, item := range snapshot.SplitConf(conf) {
		k, _, _ := strings.Cut(item, ":")
		if k = strings.TrimSpace(k); extension(k) || k == "memory_fraction" {
			kept = append(kept, item)
		}
	}
	return strings.Join(kept, ",")
}
