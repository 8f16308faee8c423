package report

import (
	"math/bits"

	"github.com/gpualloc/gpualloc/internal/satsum"
	"github.com/gpualloc/gpualloc/sim"
	"github.com/gpualloc/gpualloc/snapshot"
	"github.com/gpualloc/gpualloc/traces"
)

// A SizeHistogram counts the allocations of a trace by requested size, in
// power-of-two bins. Its zero value is empty and ready to use.
type SizeHistogram struct {
	// Counts[k] is the number of allocations of 2^(k-1) < size <= 2^k
	// bytes (Counts[0]: 1 byte).
	Counts [64]int64
	// Bytes[k] is the sum of their sizes, at most math.MaxInt64 (a sum
	// that would pass it stays there).
	Bytes [64]int64
}

// Add counts an allocation of size bytes; sizes below 1 are ignored.
func (h *SizeHistogram) Add(size int64) {
	if size < 1 {
		return
	}
	k := bits.Len64(uint64(size - 1))
	h.Counts[k]++
	h.Bytes[k] = satsum.Add(h.Bytes[k], size)
}

// Total returns the number of allocations counted.
func (h *SizeHistogram) Total() int64 {
	var n int64
	for _, c := range h.Counts {
		n += c
	}
	return n
}

// bins returns the first and last non-empty bin; ok is false when the
// histogram is empty.
func (h *SizeHistogram) bins() (lo, hi int, ok bool) {
	lo, hi = -1, -1
	for k, c := range h.Counts {
		if c == 0 {
			continue
		}
		if lo < 0 {
			lo = k
		}
		hi = k
	}
	return lo, hi, lo >= 0
}

// A SizeCounter is a [traces.Reader] that passes on the events of another
// reader and counts the sizes of its allocations in Sizes, for the trace
// figure of a report. Wrap the reader of one replay of each trace in one;
// it costs a few nanoseconds an event.
type SizeCounter struct {
	traces.Reader
	Sizes SizeHistogram
}

// DeviceCapacity is that of the reader, if it is a
// sim.CapacityReporter, else 0.
func (c *SizeCounter) DeviceCapacity(device int) int64 {
	if cr, ok := c.Reader.(sim.CapacityReporter); ok {
		return cr.DeviceCapacity(device)
	}
	return 0
}

// Stacks are those of the reader (see traces.StackReporter).
func (c *SizeCounter) Stacks() ([]snapshot.Frame, [][]int32) { return traces.StacksOf(c.Reader) }

// Start is that of the reader (see traces.StartReporter).
func (c *SizeCounter) Start() *traces.Start { return traces.StartOf(c.Reader) }

// NewSizeCounter returns a SizeCounter reading r.
func NewSizeCounter(r traces.Reader) *SizeCounter { return &SizeCounter{Reader: r} }

// Scan advances to the next event, counting it if it is an allocation.
func (c *SizeCounter) Scan() bool {
	if !c.Reader.Scan() {
		return false
	}
	if ev := c.Reader.Event(); ev.Op == traces.OpAlloc {
		c.Sizes.Add(ev.Size)
	}
	return true
}

// Name returns the name of the underlying reader, if it has one.
func (c *SizeCounter) Name() string {
	if n, ok := c.Reader.(interface{ Name() string }); ok {
		return n.Name()
	}
	return ""
}

// Format returns the format of the underlying reader, if it names one.
func (c *SizeCounter) Format() string {
	if f, ok := c.Reader.(interface{ Format() string }); ok {
		return f.Format()
	}
	return ""
}

// MidRun reports whether the underlying reader's trace is a window of a
// running program (see traces.FileReader).
func (c *SizeCounter) MidRun() bool {
	m, ok := c.Reader.(interface{ MidRun() bool })
	return ok && m.MidRun()
}

// Skipped returns the bad events the underlying reader skipped, if it
// counts them.
func (c *SizeCounter) Skipped() int64 {
	if s, ok := c.Reader.(interface{ Skipped() int64 }); ok {
		return s.Skipped()
	}
	return 0
}
