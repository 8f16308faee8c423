package gmlake_test

import (
	"testing"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/gmlake"
	"github.com/gpualloc/gpualloc/strategy/strategytest"
)

const (
	MiB = 1 << 20
	GiB = 1 << 30
)

func openWith(c gmlake.Config) strategytest.OpenFunc {
	return func(b gpualloc.Backend) (gpualloc.Allocator, error) { return gmlake.New(b, c) }
}

// TestConformance runs the suite with glake's defaults and with settings
// that stitch on the suite's small device, on the suite's Device (virtual
// memory: stitching) and on one without virtual memory.
func TestConformance(t *testing.T) {
	stitchy := gmlake.DefaultConfig()
	stitchy.FragLimit = 0
	level1 := stitchy
	level1.DefragLevel = 1
	tinyGC := stitchy
	tinyGC.AutoGC = 64 * MiB
	for name, c := range map[string]gmlake.Config{
		"default": gmlake.DefaultConfig(), "frag_limit=0": stitchy,
		"defrag_level=1": level1, "auto_gc=64MiB": tinyGC,
	} {
		t.Run(name, func(t *testing.T) {
			strategytest.Run(t, openWith(c), &strategytest.Options{Caching: true, Align: 512})
		})
		t.Run(name+"/no-vm", func(t *testing.T) {
			strategytest.Run(t, func(b gpualloc.Backend) (gpualloc.Allocator, error) {
				return gmlake.New(plain{b}, c)
			}, &strategytest.Options{Caching: true, Align: 512})
		})
	}
}

// plain hides a backend's virtual memory.
type plain struct{ gpualloc.Backend }
