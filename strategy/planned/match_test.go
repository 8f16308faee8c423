package planned_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/planned"
	"github.com/gpualloc/gpualloc/strategy/strategytest"
	"github.com/gpualloc/gpualloc/traces"
)

// op is one event of a test trace: an allocation of size under id, or
// (size 0) the free of id.
type op struct {
	id   uint64
	size int64
}

// steady returns a trace of a prefix (two weights that stay) and n steps
// of a loop: activations kept for a backward pass, temporaries freed at
// once, a gradient freed in the next step. sizes[i] replaces the size of
// the i-th activation of step s when changed(s, i) says so.
func steady(n int, changed func(step, i int) int64) []op {
	var ops []op
	id := uint64(1)
	alloc := func(size int64) uint64 {
		ops = append(ops, op{id, size})
		id++
		return id - 1
	}
	free := func(x uint64) { ops = append(ops, op{id: x}) }
	alloc(1 << 20)
	alloc(3 << 20)
	var grad uint64
	for s := range n {
		var acts []uint64
		for i := range 6 {
			size := int64(64<<10) * int64(i+1)
			if changed != nil {
				if c := changed(s, i); c > 0 {
					size = c
				}
			}
			acts = append(acts, alloc(size))
			free(alloc(32 << 10))
		}
		if grad != 0 {
			free(grad)
		}
		for i := len(acts) - 1; i >= 0; i-- {
			free(alloc(16 << 10))
			free(acts[i])
		}
		grad = alloc(1 << 20)
	}
	return ops
}

// writeProfile writes ops as a native trace and returns its path.
func writeProfile(t testing.TB, ops []op) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "profile.csv")
	f, err := os.Create(path)
	require.NoError(t, err)
	w := traces.NewWriter(f, traces.ColOp, traces.ColID, traces.ColSize)
	sizes := map[uint64]int64{}
	for _, o := range ops {
		if o.size > 0 {
			sizes[o.id] = o.size
			require.NoError(t, w.Write(traces.Event{Op: traces.OpAlloc, ID: o.id, Size: o.size}))
		} else {
			require.NoError(t, w.Write(traces.Event{Op: traces.OpFree, ID: o.id, Size: sizes[o.id]}))
		}
	}
	require.NoError(t, w.Flush())
	require.NoError(t, f.Close())
	return path
}

// replay serves ops and returns, for each allocation in order, whether it
// was served from the plan, checking that live blocks never overlap.
func replay(t *testing.T, a *planned.Allocator, ops []op) []bool {
	t.Helper()
	live := map[uint64]gpualloc.Block{}
	var from []bool
	for _, o := range ops {
		if o.size == 0 {
			require.NoError(t, a.Free(live[o.id]))
			delete(live, o.id)
			continue
		}
		b, err := a.Alloc(o.size)
		require.NoError(t, err)
		for _, l := range live {
			require.False(t, b.Addr < l.End() && l.Addr < b.End(), "block %+v overlaps %+v", b, l)
		}
		live[o.id] = b
		from = append(from, a.Planned(b))
	}
	for _, b := range live {
		require.NoError(t, a.Free(b))
	}
	return from
}

func count(v []bool) (n int) {
	for _, x := range v {
		if x {
			n++
		}
	}
	return n
}

func open(t *testing.T, profile string, edit func(*planned.Config)) *planned.Allocator {
	t.Helper()
	c := planned.DefaultConfig()
	c.Profile = profile
	if edit != nil {
		edit(&c)
	}
	a, err := planned.New(strategytest.NewDevice(1<<34), c)
	require.NoError(t, err)
	return a
}

func TestMatching(t *testing.T) {
	const steps = 20
	prof := writeProfile(t, steady(steps, nil))
	per := 6*2 + 6 + 1 // allocations of a step
	for _, tc := range []struct {
		name    string
		ops     []op
		planned func(t *testing.T, from []bool)
	}{
		{"same run: every request planned", steady(steps, nil), func(t *testing.T, from []bool) {
			require.Equal(t, len(from), count(from))
		}},
		{"mismatch: a changed size goes to the fallback, the step goes on", steady(steps, func(s, i int) int64 {
			if s == 10 && i == 2 {
				return 100 << 10
			}
			return 0
		}), func(t *testing.T, from []bool) {
			at := 2 + 10*per + 2*2 // the changed activation
			require.False(t, from[at])
			require.Equal(t, per, count(from[2+12*per:2+13*per]), "two steps later")
		}},
		{"shapes change every step: nothing wrongly planned", steady(steps, func(s, i int) int64 { return int64(s*7+i+1) << 12 }), func(t *testing.T, from []bool) {
			require.Less(t, count(from), len(from))
		}},
		{"resync: an inserted request shifts the run, a unique run sets it back", func() []op {
			ops := steady(steps, nil)
			at := 2 + 5*(per*2) // inside step 5
			ins := []op{{id: 1 << 40, size: 5 << 10}, {id: 1 << 40}}
			return append(ops[:at:at], append(ins, ops[at:]...)...)
		}(), func(t *testing.T, from []bool) {
			require.Equal(t, per, count(from[len(from)-per:]), "the last step")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := open(t, prof, nil)
			info, ok := a.Plan()
			require.True(t, ok)
			require.Equal(t, per, info.Requests)
			tc.planned(t, replay(t, a, tc.ops))
		})
	}
}

// TestAuto checks that learning the step from the run never needs more
// than the fallback alone.
func TestAuto(t *testing.T) {
	ops := steady(40, nil)
	for _, share := range []float64{0, 0.25} {
		a := open(t, planned.Auto, func(c *planned.Config) { c.MinShare = share })
		replay(t, a, ops)
		fb := open(t, planned.Auto, func(c *planned.Config) { c.MinStep = len(ops) / 2; c.MaxProfile = len(ops) })
		replay(t, fb, ops)
		_, ok := fb.Plan()
		require.False(t, ok)
		require.LessOrEqual(t, a.Stats().PeakReserved, fb.Stats().PeakReserved)
	}
}

func TestProfileFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(text), 0o644))
		return p
	}
	for _, tc := range []struct {
		name, path, err string
		edit            func(*planned.Config)
	}{
		{name: "steady", path: writeProfile(t, steady(8, nil))},
		{name: "missing", path: filepath.Join(dir, "nothing.csv"), err: "planned: profile: "},
		{name: "bad line", path: write("bad.csv", "op,id,size\nalloc,1,10\nfree,2,\n"), err: "bad.csv:3"},
		{name: "no step", path: write("flat.csv", "op,id,size\nalloc,1,10\nalloc,2,20\nfree,1,\nfree,2,\n"), err: "no step found on device 0"},
		{name: "other device", path: writeProfile(t, steady(8, nil)), err: "no step found on device 1", edit: func(c *planned.Config) { c.Device = 1 }},
		{name: "changing shapes", path: writeProfile(t, steady(8, func(s, i int) int64 { return int64(s+1) << 14 })), err: "no step found"},
		{name: "a small run recurs, not the step", path: writeProfile(t, func() []op {
			ops := steady(8, func(s, i int) int64 { return int64(s+1) << 20 })
			for r := range 8 * 6 {
				id := uint64(1<<40 + r)
				ops = append(ops, op{id: id, size: int64(1+r%8) << 12}, op{id: id})
			}
			return ops
		}()), err: "peaks below min_share (0.25) of the profile's peak"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := planned.DefaultConfig()
			c.Profile = tc.path
			if tc.edit != nil {
				tc.edit(&c)
			}
			_, err := planned.New(strategytest.NewDevice(1<<34), c)
			if tc.err == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.err)
			require.Equal(t, 1, strings.Count(err.Error(), "\n")+1)
		})
	}
}

func TestRegistry(t *testing.T) {
	prof := writeProfile(t, steady(8, nil))
	for _, tc := range []struct{ spec, err string }{
		{spec: "planned"},
		{spec: "planned:fallback=bestfit,time_limit=200ms,window=4"},
		{spec: "planned:profile=" + prof},
		{spec: "planned:fallback=tlsf", err: "fallback"},
		{spec: "planned:time_limit=soon", err: "time_limit"},
		{spec: "planned:window=0", err: "window"},
		{spec: "planned:min_hit=2", err: "min_hit"},
		{spec: "planned:min_share=x", err: "min_share"},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			spec, err := gpualloc.ParseSpec(tc.spec)
			require.NoError(t, err)
			p, err := gpualloc.Resolve(spec, func(string) (string, bool) { return "", false })
			require.NoError(t, err)
			a, err := p.Open(strategytest.NewDevice(1 << 30))
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.True(t, strings.HasPrefix(a.(gpualloc.Specer).Spec(), "planned:profile="))
		})
	}
}

// TestDrop checks that a plan whose requests stop coming is dropped, the
// weights planned at the bottom of its region staying where they are, and
// the rest of the region going back to the device once it holds no block
// (here before any request could use its gaps: region_test.go checks them).
func TestDrop(t *testing.T) {
	prof := writeProfile(t, steady(20, nil))
	per := 6*2 + 6 + 1
	ops := steady(20, func(s, i int) int64 { return int64(s*6+i+1) << 12 })
	for _, reuse := range []bool{false, true} {
		a := open(t, prof, func(c *planned.Config) { c.Reuse = reuse })
		from := replay(t, a, ops)
		require.True(t, from[0] && from[1], "the weights, planned")
		info, ok := a.Plan()
		require.False(t, ok, "dropped")
		require.EqualValues(t, 1, info.Plans)
		require.Zero(t, count(from[len(from)-per:]))
		require.NoError(t, a.ReleaseAll())
		require.Zero(t, a.Stats().Reserved, "everything freed and released")
	}
}

func TestNewValidates(t *testing.T) {
	for _, tc := range []struct {
		edit func(*planned.Config)
		err  string
	}{
		{func(c *planned.Config) { c.Profile = "" }, "planned: profile=: must be auto or a trace file"},
		{func(c *planned.Config) { c.Device = -1 }, "planned: device=-1: must not be negative"},
		{func(c *planned.Config) { c.Fallback = 7 }, "planned: fallback=Fallback(7): must be pytorch or bestfit"},
		{func(c *planned.Config) { c.TimeLimit = 0 }, "planned: time_limit=0s: must be positive"},
		{func(c *planned.Config) { c.Window = 0 }, "planned: window=0: must be from 1 to 1024"},
		{func(c *planned.Config) { c.MinStep = 0 }, "planned: min_step=0: must be positive"},
		{func(c *planned.Config) { c.MinHit = 1.5 }, "planned: min_hit=1.5: must be from 0 to 1"},
		{func(c *planned.Config) { c.MinShare = -1 }, "planned: min_share=-1: must be from 0 to 1"},
		{func(c *planned.Config) { c.MaxProfile = 15 }, "planned: max_profile=15: must be at least twice min_step"},
	} {
		c := planned.DefaultConfig()
		tc.edit(&c)
		_, err := planned.New(strategytest.NewDevice(1<<30), c)
		require.EqualError(t, err, tc.err)
		var pe *gpualloc.ParamError
		require.ErrorAs(t, err, &pe)
	}
}
