// Package alloctest holds the test and benchmark helpers that the tests of
// every built-in strategy share: table-driven checks of a strategy's
// constructor and of its registry entry, the conformance suite run under
// several configurations, and the bodies of the benchmarks of a pool's own
// calls, so that each strategy's tests hold only its own tables and its own
// rules. The helpers that replay traces are in internal/replaytest, which
// imports the simulator; this package imports neither it nor the trace
// readers.
package alloctest

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/backend/virtual"
	"github.com/gpualloc/gpualloc/strategy/strategytest"
)

// A Pool is a built-in strategy's pool as the helpers see it.
type Pool[C any] interface {
	gpualloc.Allocator
	gpualloc.Specer
	Config() C
}

// A Strategy is a built-in strategy: its registry name, its constructor
// and its default configuration, which the checks below always include.
type Strategy[C comparable, P Pool[C]] struct {
	Name    string
	New     func(gpualloc.Backend, C) (P, error)
	Default C
}

// Open returns what [strategytest.Check] opens: a pool of configuration c.
func (s Strategy[C, P]) Open(c C) strategytest.OpenFunc { return Open(s.New, c) }

// Open returns what [strategytest.Check] and the simulator open: what
// newPool makes of c on the backend they give.
func Open[C any, P gpualloc.Allocator](newPool func(gpualloc.Backend, C) (P, error), c C) strategytest.OpenFunc {
	return func(b gpualloc.Backend) (gpualloc.Allocator, error) {
		p, err := newPool(b, c)
		if err != nil {
			return nil, err // not a nil *Pool in a non-nil Allocator
		}
		return p, nil
	}
}

// NewPool returns a pool of configuration c on a fresh [virtual.Device]
// of capacity bytes, failing t on an error.
func (s Strategy[C, P]) NewPool(t testing.TB, capacity int64, c C) P {
	t.Helper()
	p, _ := New(t, capacity, s.New, c)
	return p
}

// New returns what newPool makes of c on a fresh [virtual.Device] of
// capacity bytes, and the device, failing t on an error.
func New[C, P any](t testing.TB, capacity int64, newPool func(gpualloc.Backend, C) (P, error), c C) (P, *virtual.Device) {
	t.Helper()
	dev := strategytest.NewDevice(capacity)
	p, err := newPool(dev, c)
	require.NoError(t, err, "%+v", c)
	return p, dev
}

// With returns the default configuration changed by f: a configuration a
// field or two off the default, for tables of configurations.
func (s Strategy[C, P]) With(f func(c *C)) C {
	c := s.Default
	f(&c)
	return c
}

// Conformance runs [strategytest.Run] on a pool of the default
// configuration, then of each of configs, in a subtest named by the pool's
// spec without the strategy's name, as "round=512,min_block=512,chunk=20971520".
func (s Strategy[C, P]) Conformance(t *testing.T, configs []C, opt *strategytest.Options) {
	t.Helper()
	for _, c := range append([]C{s.Default}, configs...) {
		spec := s.NewPool(t, 1<<40, c).Spec()
		t.Run(strings.TrimPrefix(spec, s.Name+":"), func(t *testing.T) {
			strategytest.Run(t, s.Open(c), opt)
		})
	}
}

// A ConfigCase is a configuration and the error New gives for it, "" for
// none.
type ConfigCase[C any] struct {
	Config C
	Err    string
}

// NewValidates checks New on the default configuration, then on each case:
// a valid configuration gives a pool that reports it, an invalid one a nil
// pool and exactly the error of the case, which wraps a
// [*gpualloc.ParamError]. It also checks that New with a nil Backend and
// the default configuration fails.
func (s Strategy[C, P]) NewValidates(t *testing.T, cases []ConfigCase[C]) {
	t.Helper()
	dev := strategytest.NewDevice(1 << 30)
	for _, tt := range append([]ConfigCase[C]{{Config: s.Default}}, cases...) {
		p, err := s.New(dev, tt.Config)
		if tt.Err == "" {
			require.NoError(t, err, "%+v", tt.Config)
			assert.Equal(t, tt.Config, p.Config())
			continue
		}
		assert.EqualError(t, err, tt.Err, "%+v", tt.Config)
		var pe *gpualloc.ParamError
		assert.ErrorAs(t, err, &pe, "%+v", tt.Config)
		assert.Nil(t, p)
	}
	_, err := s.New(nil, s.Default)
	assert.EqualError(t, err, s.Name+": nil Backend")
}

// DefaultSpec checks that a pool of the default configuration reports the
// spec want, and that the registry's defaults open the same pool.
func (s Strategy[C, P]) DefaultSpec(t *testing.T, want string) {
	t.Helper()
	assert.Equal(t, want, s.NewPool(t, 1<<30, s.Default).Spec())
	params, err := gpualloc.Resolve(gpualloc.Spec{Name: s.Name}, nil)
	require.NoError(t, err)
	assert.Equal(t, want, params.String(), "the registry's defaults are the default configuration")
}

// A SelectCase is a spec and an environment, and the configuration of the
// pool they select, or the error selecting or opening it gives.
type SelectCase[C any] struct {
	Name string // of the subtest; the spec if empty
	Spec string
	Env  func(string) (string, bool) // nil: an empty environment
	Want C
	Err  string
}

// Select checks each case: [gpualloc.Select] of the spec in the environment,
// then Open on a device of capacity bytes, must give a pool of the
// strategy with configuration Want and spec spec(Want), or else exactly
// the error Err.
func (s Strategy[C, P]) Select(t *testing.T, capacity int64, spec func(C) string, cases []SelectCase[C]) {
	t.Helper()
	for _, tt := range cases {
		name := tt.Name
		if name == "" {
			name = tt.Spec
		}
		t.Run(name, func(t *testing.T) {
			sel, err := gpualloc.Select(tt.Spec, tt.Env)
			var a gpualloc.Allocator
			if err == nil {
				a, err = sel.Open(strategytest.NewDevice(capacity))
			}
			if tt.Err != "" {
				assert.EqualError(t, err, tt.Err)
				return
			}
			require.NoError(t, err)
			p, ok := a.(P)
			require.True(t, ok, "%T", a)
			assert.Equal(t, tt.Want, p.Config())
			assert.Equal(t, spec(tt.Want), p.Spec())
		})
	}
}

// Params checks the registry entry of the strategy, looked up as name
// (in any case): a summary, the names of its parameters and their defaults,
// in order, and a doc for each. It returns the entry for further checks.
func (s Strategy[C, P]) Params(t *testing.T, name string, names, defaults []string) gpualloc.Strategy {
	t.Helper()
	st, err := gpualloc.Lookup(name)
	require.NoError(t, err)
	assert.Equal(t, s.Name, st.Name)
	assert.NotEmpty(t, st.Summary)
	var gotNames, gotDefaults []string
	for _, p := range st.Params {
		gotNames = append(gotNames, p.Name)
		gotDefaults = append(gotDefaults, p.Default)
		assert.NotEmpty(t, p.Doc, p.Name)
	}
	assert.Equal(t, names, gotNames)
	assert.Equal(t, defaults, gotDefaults)
	return st
}

// Env returns a getenv that knows the given NAME=value pairs.
func Env(kv ...string) func(string) (string, bool) {
	if len(kv)%2 != 0 {
		panic(fmt.Sprintf("alloctest: Env of %d strings: want pairs", len(kv)))
	}
	m := map[string]string{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

// ForSeeds runs test in a subtest named "config=i,seed=s" for each
// configuration, i its index, and each seed s from 1 to seeds.
func ForSeeds[C any](t *testing.T, configs []C, seeds uint64, test func(t *testing.T, i int, c C, seed uint64)) {
	t.Helper()
	for i, c := range configs {
		for seed := uint64(1); seed <= seeds; seed++ {
			t.Run(fmt.Sprintf("config=%d,seed=%d", i, seed), func(t *testing.T) { test(t, i, c, seed) })
		}
	}
}

// Refusing is a test device whose Free fails with "device busy".
type Refusing struct{ *virtual.Device }

// Free refuses.
func (Refusing) Free(uint64, int64) error { return errors.New("device busy") }

// A Releaser is a pool as [ReleaseRefused] sees it.
type Releaser interface {
	gpualloc.Allocator
	gpualloc.Releaser
}

// ReleaseRefused checks a pool p, of the strategy name, on a [Refusing]
// device, when the device refuses to take memory back: after an Alloc of 1
// byte and its Free, ReleaseAll fails with the device's error, the pool's
// invariants still hold (check), what it could not release stays (its
// layout is want) and serves the next Alloc of 1 byte.
func ReleaseRefused(t *testing.T, p Releaser, name string, check func() error, layout func() string, want string) {
	t.Helper()
	a, err := p.Alloc(1)
	require.NoError(t, err)
	require.NoError(t, p.Free(a))
	assert.EqualError(t, p.ReleaseAll(), name+": release: device busy")
	require.NoError(t, check())
	assert.Equal(t, want, layout(), "what the device refused to free stays")
	b, err := p.Alloc(1)
	require.NoError(t, err)
	assert.Equal(t, a.Addr, b.Addr)
}
