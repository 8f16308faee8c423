package sim

import (
	"slices"
	"strings"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/snapshot"
	"github.com/gpualloc/gpualloc/traces"
)

// recordedParams returns p with what start records of the allocator
// that ran the trace, where p leaves it to the recording, and whether p
// took the recorded settings. A p of no parameter of its own takes the
// recorded settings (traces.Start.Conf) as its conf. Whatever its
// settings, a p whose version and device are auto (and whose conf names
// neither) follows the allocator that recorded the trace: the release
// that wrote it (traces.Start.Release, or the version a replay's own
// snapshot records in its conf; auto is the newest already) and
// torch_npu's allocator where the recorded conf says device:npu. So
// version=auto means the same with settings of the user's as without.
func recordedParams(start *traces.Start, p *gpualloc.Params, trace string) (*gpualloc.Params, bool) {
	if p == nil || start == nil || !takesConf(p) {
		return p, false
	}
	recorded := false
	if !p.Explicit() && start.Conf != "" {
		p, recorded = p.WithDefault("conf", start.Conf, "the allocator_settings of "+trace), true
	}
	release := start.Release
	if v, ok := snapshot.ConfValue(start.Conf, "version"); ok {
		release = v // a replay's own snapshot records its release
	}
	own := p.Value("conf")
	if _, named := snapshot.ConfValue(own, "version"); !named && isRelease(release) && release != snapshot.NewestPyTorch {
		p = p.WithDefault("version", release, "the release that wrote "+trace)
	}
	if _, named := snapshot.ConfValue(own, "device"); !named && snapshot.NPUConf(start.Conf) {
		p = p.WithDefault("device", "npu", "the allocator that wrote "+trace)
	}
	return p, recorded
}

// takesConf reports whether p's strategy reads PyTorch's settings: a conf
// parameter that PYTORCH_CUDA_ALLOC_CONF sets.
func takesConf(p *gpualloc.Params) bool {
	for _, d := range p.Declared() {
		if d.Name == "conf" && slices.Contains(d.Env, "PYTORCH_CUDA_ALLOC_CONF") {
			return true
		}
	}
	return false
}

// isRelease reports whether release names a release of PyTorch ("2.8"),
// not torch_npu's or none.
func isRelease(release string) bool {
	return release != "" && !strings.ContainsFunc(release, func(r rune) bool { return r != '.' && (r < '0' || r > '9') })
}
