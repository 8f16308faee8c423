package pytorch

import (
	"errors"

	"github.com/gpualloc/gpualloc"
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
// winning: PYTORCH_ALLOC_CONF, PyTorch's current name, before
// PYTORCH_CUDA_ALLOC_CONF, as AcceleratorAllocatorConfig::instance reads
// them (c10/core/AllocatorConfig.cpp, which warns that the second is
// deprecated).
var confEnv = []string{"PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"}

func init() {
	gpualloc.Register(gpualloc.Strategy{
		Name:    name,
		Summary: "PyTorch's CUDA caching allocator, rule for rule: per-stream small and large pools, best fit on (size, address), PyTorch's rounding, splitting, segment sizes and release-and-retry",
		Params: []gpualloc.Param{
			{Name: "conf", Default: "none", Env: confEnv, Settings: confSettings,
				Doc: "settings in the syntax of PYTORCH_ALLOC_CONF (max_split_size_mb:128,...), read first; the parameters below override them"},
			{Name: "max_split_size_mb", Default: auto, Doc: "blocks this large (MiB, at least 20) are never split (unlimited or inf: no limit; auto: from conf, else unlimited)"},
			{Name: "roundup_power2_divisions", Default: auto, Doc: "divisions per power of two when rounding: one number, or MiB:divisions entries separated by ';' as 256:1;512:2;>:8 (auto: from conf, else none)"},
			{Name: "garbage_collection_threshold", Default: auto, Doc: "with memory_fraction, free old cached segments when reserved memory exceeds this fraction of the cap (auto: from conf, else off)"},
			{Name: "expandable_segments", Default: auto, Doc: "one growing virtual range per stream and pool, mapped in 2 MiB or 20 MiB pages (auto: from conf, else false)"},
			{Name: "max_non_split_rounding_mb", Default: auto, Doc: "a request of at least max_split_size_mb is not served from a block this many MiB larger (auto: from conf, else 20)"},
			{Name: "memory_fraction", Default: auto, Doc: "cap reserved memory at this fraction of the device, as torch.cuda.set_per_process_memory_fraction (auto: from conf, else no cap)"},
			{Name: "version", Default: auto, Doc: "the PyTorch release whose allocator rules apply, 2.0 to 2.11, e.g. 2.5 (auto: from conf, which a snapshot's settings set to the release its contents point to, else the newest)"},
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
