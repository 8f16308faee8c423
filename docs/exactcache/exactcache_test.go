// exactcache_test.go
package main

import (
	"testing"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/strategytest"
)

func open(b gpualloc.Backend) (gpualloc.Allocator, error) {
	return gpualloc.Open("exactcache", b)
}

// TestConformance runs the conformance suite on the strategy.
func TestConformance(t *testing.T) {
	strategytest.Run(t, open, nil)
}

// TestConformanceCaching runs it again with the check that a block freed
// is served again without a device malloc.
func TestConformanceCaching(t *testing.T) {
	strategytest.Run(t, open, &strategytest.Options{Caching: true})
}
