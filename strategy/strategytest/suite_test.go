package strategytest

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
)

// bug is a defect planted in testPool, to show the suite finds it.
type bug int

const (
	noBug            bug = iota
	bugOverlap           // a cache hit leaves the block in the cache
	bugMisaligned        // blocks start 8 bytes into their region
	bugPastRegion        // Size is larger than the region under the block
	bugStats             // Free forgets to count the Requested bytes
	bugNoFreeCheck       // Free accepts any block
	bugZeroSize          // Alloc(0) succeeds
	bugOOMUnwrapped      // running out of memory is a plain error
	bugLeak              // ReleaseAll keeps one cached block
	bugNoCache           // freed blocks go straight back to the device
	bugHitsUncounted     // cache hits are not counted
	bugBadDeviceFree     // ReleaseAll frees with the wrong size and ignores the error
	bugUnusable          // after an OOM every Alloc fails
	bugSpec              // Spec does not parse
	bugStreamLost        // AllocStream returns blocks of stream 0
	bugFreeSpace         // FreeSpace counts live blocks as free
)

// testPool is a small caching allocator: exact-size LIFO free lists, no
// rounding beyond 512 bytes, release-all-and-retry on OOM. With a bug
// planted, it is wrong in one way.
type testPool struct {
	b     gpualloc.Backend
	bug   bug
	m     gpualloc.Meter
	live  map[uint64]gpualloc.Block
	cache map[int64][]uint64
	dead  bool
}

func newTestPool(b gpualloc.Backend, bg bug) *testPool {
	return &testPool{b: b, bug: bg, live: map[uint64]gpualloc.Block{}, cache: map[int64][]uint64{}}
}

func (p *testPool) Stats() gpualloc.Stats { return p.m.Stats() }

func (p *testPool) Spec() string {
	if p.bug == bugSpec {
		return "testpool:"
	}
	return "testpool"
}

// alignUp rounds x up to a multiple of a, a power of two.
func alignUp(x, a uint64) uint64 { return (x + a - 1) &^ (a - 1) }

func (p *testPool) Alloc(size int64) (gpualloc.Block, error) {
	if size <= 0 && p.bug != bugZeroSize {
		return gpualloc.Block{}, gpualloc.ErrInvalidSize
	}
	if p.dead || size > 1<<50 {
		p.m.CountOOM()
		return gpualloc.Block{}, gpualloc.ErrOutOfMemory
	}
	rounded := max(alignUp(uint64(size), 512), 512)
	n := int64(rounded)
	blk := gpualloc.Block{Size: n, Requested: size}
	if p.bug == bugPastRegion {
		blk.Size += 4096
	}
	if l := p.cache[n]; len(l) > 0 {
		blk.Addr = l[len(l)-1]
		if p.bug != bugOverlap {
			p.cache[n] = l[:len(l)-1]
		}
		p.live[blk.Addr] = blk
		p.m.CountAlloc(blk.Requested, blk.Size, p.bug != bugHitsUncounted)
		return blk, nil
	}
	addr, err := p.b.Malloc(n)
	if err != nil {
		p.ReleaseAll()
		p.m.CountRetry()
		addr, err = p.b.Malloc(n)
	}
	if err != nil {
		p.m.CountOOM()
		if p.bug == bugOOMUnwrapped {
			return gpualloc.Block{}, errors.New("no memory")
		}
		if p.bug == bugUnusable {
			p.dead = true
		}
		return gpualloc.Block{}, fmt.Errorf("testpool: %w", err)
	}
	p.m.CountDeviceMalloc(n)
	blk.Addr = addr
	if p.bug == bugMisaligned {
		blk.Addr += 8
		blk.Size -= 8
	}
	p.live[blk.Addr] = blk
	p.m.CountAlloc(blk.Requested, blk.Size, false)
	return blk, nil
}

func (p *testPool) Free(b gpualloc.Block) error {
	if l, ok := p.live[b.Addr]; (!ok || l != b) && p.bug != bugNoFreeCheck {
		return gpualloc.ErrInvalidFree
	}
	delete(p.live, b.Addr)
	if p.bug == bugStats {
		p.m.CountFree(0, b.Size)
	} else {
		p.m.CountFree(b.Requested, b.Size)
	}
	addr, size := b.Addr, int64(alignUp(uint64(b.Requested), 512))
	if p.bug == bugMisaligned {
		addr -= 8
	}
	if p.bug == bugNoCache {
		p.m.CountDeviceFree(size)
		return p.b.Free(addr, size)
	}
	p.cache[size] = append(p.cache[size], addr)
	return nil
}

func (p *testPool) ReleaseAll() error {
	keep := p.bug == bugLeak
	for size, addrs := range p.cache {
		for i, a := range addrs {
			if keep && i == 0 {
				continue
			}
			n := size
			if p.bug == bugBadDeviceFree {
				n++
			}
			if err := p.b.Free(a, n); err != nil && p.bug != bugBadDeviceFree {
				return err
			}
			p.m.CountDeviceFree(size)
		}
		if keep && len(addrs) > 0 {
			p.cache[size] = addrs[:1]
			keep = false
			continue
		}
		delete(p.cache, size)
	}
	return nil
}

// FreeSpace reports the cached blocks (leaving out, with bugOverlap, those
// handed out again, so that the overlap is the only symptom).
func (p *testPool) FreeSpace() (largest, total int64) {
	for size, addrs := range p.cache {
		for _, a := range addrs {
			if _, live := p.live[a]; !live {
				largest = max(largest, size)
				total += size
			}
		}
	}
	if p.bug == bugFreeSpace {
		for _, b := range p.live {
			total += b.Size
		}
	}
	return largest, total
}

// streamTestPool is a testPool that tags blocks with their stream.
type streamTestPool struct{ *testPool }

func (p streamTestPool) AllocStream(size int64, stream uint64) (gpualloc.Block, error) {
	b, err := p.Alloc(size)
	if err != nil || p.bug == bugStreamLost {
		return b, err
	}
	b.Stream = stream
	p.live[b.Addr] = b
	return b, nil
}

func openTestPool(bg bug) OpenFunc {
	return func(b gpualloc.Backend) (gpualloc.Allocator, error) { return newTestPool(b, bg), nil }
}

// runChecks runs every check of the suite through Check and returns the
// failures by check name.
func runChecks(open OpenFunc, opt *Options) map[string]error {
	failed := map[string]error{}
	err := Check(open, opt)
	if err == nil {
		return failed
	}
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		name, _, ok := strings.Cut(e.Error(), ": ")
		if !ok {
			panic("strategytest: a failure that does not begin with its check's name: " + e.Error())
		}
		failed[name] = errors.Unwrap(e)
	}
	return failed
}

func TestRunPassesCorrectAllocator(t *testing.T) {
	Run(t, openTestPool(noBug), &Options{Caching: true, Align: 512})
}

func TestChecksPassCorrectAllocator(t *testing.T) {
	for _, opt := range []*Options{
		nil,
		{Caching: true, Align: 512, Ops: 500},
		{Capacity: 8 << 20, Caching: true, Seeds: []uint64{9}},
		{Capacity: 1 << 40, MaxSize: 1 << 34, Caching: true, Ops: 300},
	} {
		assert.Empty(t, runChecks(openTestPool(noBug), opt), "options %+v", opt)
	}
}

func TestRunPassesStreamAllocator(t *testing.T) {
	Run(t, func(b gpualloc.Backend) (gpualloc.Allocator, error) {
		return streamTestPool{newTestPool(b, noBug)}, nil
	}, &Options{Caching: true})
}

func TestChecksFindStreamBug(t *testing.T) {
	failed := runChecks(func(b gpualloc.Backend) (gpualloc.Allocator, error) {
		return streamTestPool{newTestPool(b, bugStreamLost)}, nil
	}, nil)
	require.Contains(t, failed, "Blocks")
	assert.Contains(t, failed["Blocks"].Error(), "AllocStream(1, 1) = {Addr:0x")
	assert.Contains(t, failed["Blocks"].Error(), "Stream = 0, want 1")
	require.Contains(t, failed, "RandomTrace/seed=1")
}

func TestCheck(t *testing.T) {
	assert.NoError(t, Check(openTestPool(noBug), &Options{Caching: true, Ops: 500}))

	err := Check(openTestPool(bugZeroSize), &Options{Caching: true, Seeds: []uint64{1, 2}, Ops: 2000})
	require.Error(t, err)
	errs := err.(interface{ Unwrap() []error }).Unwrap()
	require.Len(t, errs, 3, "InvalidSize and both random traces fail: %v", err)
	assert.Equal(t, "InvalidSize: op 1, Alloc(0): got {Addr:0x7f4000000000 Size:512 Requested:0}, error <nil>; want an error wrapping gpualloc.ErrInvalidSize", errs[0].Error())
	for i, e := range errs[1:] {
		assert.Regexp(t, fmt.Sprintf(`^RandomTrace/seed=%d: seed %d: op \d+, Alloc\(-?\d\): got .* want an error wrapping gpualloc.ErrInvalidSize\n`, i+1, i+1), e.Error())
	}
}

// TestChecksFindBugs runs the suite through Check on allocators with a bug
// planted, and looks for the failure in the check named.
func TestChecksFindBugs(t *testing.T) {
	tests := []struct {
		name  string
		bug   bug
		check string // a check that must fail
		want  string // in its message
	}{
		{"Overlap", bugOverlap, "Reuse", "overlaps live block"},
		{"Overlap", bugOverlap, "RandomTrace/seed=1", "overlap"},
		{"Misaligned", bugMisaligned, "Blocks", "is not a multiple of 256"},
		{"PastRegion", bugPastRegion, "Blocks", "lies outside the memory the allocator holds"},
		{"Stats", bugStats, "Blocks", "Requested = "},
		{"Stats", bugStats, "RandomTrace/seed=2", "sum of Requested over"},
		{"NoFreeCheck", bugNoFreeCheck, "InvalidFree", "want one wrapping gpualloc.ErrInvalidFree"},
		{"ZeroSize", bugZeroSize, "InvalidSize", "want an error wrapping gpualloc.ErrInvalidSize"},
		{"OOMUnwrapped", bugOOMUnwrapped, "OutOfMemory", "does not wrap gpualloc.ErrOutOfMemory"},
		{"Leak", bugLeak, "ReleaseAll", "yet the device holds"},
		{"NoCache", bugNoCache, "Reuse", "made 1 device mallocs"},
		{"HitsUncounted", bugHitsUncounted, "Reuse", "CacheHits = 0, want 1"},
		{"BadDeviceFree", bugBadDeviceFree, "ReleaseAll", "invalid device calls; the first: virtual: device 0: free of"},
		{"Unusable", bugUnusable, "OutOfMemory", "on an empty device of 268435456 bytes ran out of memory"},
		{"Spec", bugSpec, "Spec", `Spec() = "testpool:"`},
		{"FreeSpace", bugFreeSpace, "Blocks", "FreeSpace() = (largest 0, total "},
	}
	for _, tt := range tests {
		t.Run(tt.name+"/"+tt.check, func(t *testing.T) {
			failed := runChecks(openTestPool(tt.bug), &Options{Caching: true, Seeds: []uint64{1, 2}, Ops: 2000})
			err := failed[tt.check]
			require.Error(t, err, "check %s passed; failures: %v", tt.check, failed)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

func TestRandomTraceFailureNamesSeed(t *testing.T) {
	failed := runChecks(openTestPool(bugStats), &Options{Seeds: []uint64{42}, Ops: 100})
	err := failed["RandomTrace/seed=42"]
	require.Error(t, err)
	assert.Contains(t, err.Error(), "seed 42: op ")
	assert.Contains(t, err.Error(), "Options.Seeds to []uint64{42}")
}

func TestOpenFailure(t *testing.T) {
	failed := runChecks(func(gpualloc.Backend) (gpualloc.Allocator, error) {
		return nil, errors.New("no luck")
	}, nil)
	require.Contains(t, failed, "Blocks")
	assert.EqualError(t, failed["Blocks"], "open on a device of 268435456 bytes: no luck")
}

func TestOptionsDefaults(t *testing.T) {
	o := (*Options)(nil).withDefaults()
	assert.Equal(t, Options{Capacity: 256 << 20, MaxSize: 32 << 20, Align: 256, Seeds: []uint64{1, 2, 3, 4, 5}, Ops: 5000}, o)
	o = (&Options{Capacity: 1000, MaxSize: 5000}).withDefaults()
	assert.Equal(t, int64(1000), o.MaxSize, "MaxSize is capped at Capacity")
}
