package gpualloc

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakePool is a registered strategy for these tests: it records its
// parameters and hands out nothing.
type fakePool struct {
	page    int64
	cutoff  int64
	reserve float64
	strict  bool
}

func (*fakePool) Alloc(int64) (Block, error) { return Block{}, ErrOutOfMemory }
func (*fakePool) Free(Block) error           { return ErrInvalidFree }

func init() {
	Register(Strategy{
		Name:    "fakepool",
		Summary: "a strategy for the core package's tests",
		Params: []Param{
			{Name: "page", Default: "4096", Doc: "page size", Env: []string{"FAKE_PAGE", "FAKE_PAGE_OLD"}},
			{Name: "cutoff", Default: "24", Doc: "cutoff", Env: []string{"FAKE_CUTOFF"}},
			{Name: "reserve", Default: "5", Doc: "reserve percent"},
			{Name: "strict", Default: "false", Doc: "strictness"},
		},
		New: func(b Backend, p *Params) (Allocator, error) {
			var f fakePool
			var err error
			if f.page, err = p.Size("page"); err != nil {
				return nil, err
			}
			if f.cutoff, err = p.Int("cutoff"); err != nil {
				return nil, err
			}
			if f.cutoff < 20 {
				return nil, p.Errorf("cutoff", "must be at least 20")
			}
			if f.reserve, err = p.Float("reserve"); err != nil {
				return nil, err
			}
			if f.strict, err = p.Bool("strict"); err != nil {
				return nil, err
			}
			return &f, nil
		},
	})
	Register(Strategy{
		Name: "fakebare",
		New:  func(Backend, *Params) (Allocator, error) { return &fakePool{}, nil },
	})
}

func env(kv ...string) func(string) (string, bool) {
	m := map[string]string{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestRegisterPanics(t *testing.T) {
	newFn := func(Backend, *Params) (Allocator, error) { return nil, nil }
	for name, s := range map[string]Strategy{
		"empty name":    {Name: "", New: newFn},
		"upper case":    {Name: "Fake", New: newFn},
		"colon":         {Name: "a:b", New: newFn},
		"nil New":       {Name: "fakenil"},
		"duplicate":     {Name: "fakepool", New: newFn},
		"unnamed param": {Name: "fakeparam", New: newFn, Params: []Param{{Name: ""}}},
		"repeated param": {Name: "fakeparam2", New: newFn,
			Params: []Param{{Name: "a"}, {Name: "a"}}},
	} {
		assert.Panics(t, func() { Register(s) }, name)
	}
}

func TestNamesSortedAndLookup(t *testing.T) {
	names := Names()
	assert.IsNonDecreasing(t, names)
	assert.Contains(t, names, "fakepool")
	for _, n := range []string{"fakepool", "FakePool", "FAKEPOOL", " fakepool "} {
		s, err := Lookup(n)
		require.NoError(t, err, n)
		assert.Equal(t, "fakepool", s.Name)
	}
	_, err := Lookup("nosuch")
	require.Error(t, err)
	assert.Contains(t, err.Error(), `unknown strategy "nosuch" (known: `)
	assert.Contains(t, err.Error(), "fakebare, ")
}

func TestLookupEmptyRegistryHintsAtImport(t *testing.T) {
	registryMu.Lock()
	saved := registry
	registry = map[string]*Strategy{}
	registryMu.Unlock()
	t.Cleanup(func() {
		registryMu.Lock()
		registry = saved
		registryMu.Unlock()
	})
	_, err := Lookup("round")
	require.Error(t, err)
	assert.Equal(t, `unknown strategy "round": no strategy is registered (forgotten import? `+
		`import _ "github.com/gpualloc/gpualloc/strategy/all" registers the built-in ones)`, err.Error())
}

func TestResolveDefaultsEnvAndSpec(t *testing.T) {
	sp, err := ParseSpec("FakePool:cutoff=30")
	require.NoError(t, err)
	p, err := Resolve(sp, env("FAKE_PAGE_OLD", "8KiB", "FAKE_CUTOFF", "22"))
	require.NoError(t, err)
	// The spec beats the environment, which beats the default.
	assert.Equal(t, "fakepool:page=8KiB,cutoff=30,reserve=5,strict=false", p.String())
	a, err := p.Open(nil)
	require.NoError(t, err)
	assert.Equal(t, &fakePool{page: 8192, cutoff: 30, reserve: 5}, a)

	// The first set variable of a parameter's Env wins; empty counts as unset.
	p, err = Resolve(Spec{Name: "fakepool"}, env("FAKE_PAGE", "", "FAKE_PAGE_OLD", "1MiB"))
	require.NoError(t, err)
	assert.Equal(t, "1MiB", p.Value("page"))
	p, err = Resolve(Spec{Name: "fakepool"}, env("FAKE_PAGE", "64KiB", "FAKE_PAGE_OLD", "1MiB"))
	require.NoError(t, err)
	assert.Equal(t, "64KiB", p.Value("page"))

	// A nil getenv ignores the environment.
	p, err = Resolve(Spec{Name: "fakepool"}, nil)
	require.NoError(t, err)
	assert.Equal(t, "4096", p.Value("page"))
}

func TestResolveErrors(t *testing.T) {
	_, err := Resolve(Spec{Name: "fakepool", Params: []KeyValue{{"cutof", "20"}}}, nil)
	require.EqualError(t, err, `fakepool: unknown parameter "cutof" (known: page, cutoff, reserve, strict)`)
	_, err = Resolve(Spec{Name: "fakebare", Params: []KeyValue{{"x", "1"}}}, nil)
	require.EqualError(t, err, `fakebare: unknown parameter "x" (known: none)`)
	_, err = Resolve(Spec{Name: "nosuch"}, nil)
	require.ErrorContains(t, err, `unknown strategy "nosuch"`)
}

func TestParamErrorsNameTheirSource(t *testing.T) {
	open := func(spec string, getenv func(string) (string, bool)) error {
		sp, err := ParseSpec(spec)
		require.NoError(t, err)
		p, err := Resolve(sp, getenv)
		require.NoError(t, err)
		_, err = p.Open(nil)
		return err
	}
	assert.EqualError(t, open("fakepool:page=abc", nil), "fakepool: page=abc: not a size: want bytes or a number with a unit such as MiB")
	assert.EqualError(t, open("fakepool", env("FAKE_PAGE", "abc")), `FAKE_PAGE="abc": not a size: want bytes or a number with a unit such as MiB`)
	assert.EqualError(t, open("fakepool", env("FAKE_CUTOFF", "12")), `FAKE_CUTOFF="12": must be at least 20`)
	assert.EqualError(t, open("fakepool:cutoff=x", nil), "fakepool: cutoff=x: not an integer")
	assert.EqualError(t, open("fakepool:reserve=lots", nil), "fakepool: reserve=lots: not a number")
	assert.EqualError(t, open("fakepool:strict=maybe", nil), "fakepool: strict=maybe: not a boolean: want true or false")
}

func TestSelectSpecFromEnvNamesTheVariable(t *testing.T) {
	sel, err := Select("", env(EnvPoolType, "fakepool:cutoff=x"))
	require.NoError(t, err)
	_, err = sel.Open(nil)
	assert.EqualError(t, err, `GPUALLOC_POOL_TYPE="fakepool:cutoff=x": fakepool: cutoff=x: not an integer`)
	// A default the spec leaves alone is still the spec's strategy's.
	sel, err = Select("", env(EnvPoolType, "fakepool:cutoff=12"))
	require.NoError(t, err)
	_, err = sel.Open(nil)
	assert.EqualError(t, err, `GPUALLOC_POOL_TYPE="fakepool:cutoff=12": fakepool: cutoff=12: must be at least 20`)
}

func TestSelectPrecedence(t *testing.T) {
	for _, tc := range []struct {
		name     string
		explicit string
		env      func(string) (string, bool)
		spec     string
		source   string
	}{
		{"explicit beats all", "fakebare", env(EnvPoolType, "fakepool", EnvMXNetPoolType, "fakepool"), "fakebare", "spec"},
		{"GPUALLOC beats MXNet", "", env(EnvPoolType, "fakepool:cutoff=30", EnvMXNetPoolType, "fakebare"), "fakepool:page=4096,cutoff=30,reserve=5,strict=false", EnvPoolType},
		{"MXNet name, any case", "", env(EnvMXNetPoolType, "FakeBare"), "fakebare", EnvMXNetPoolType},
		{"empty GPUALLOC is unset", "", env(EnvPoolType, " ", EnvMXNetPoolType, "fakebare"), "fakebare", EnvMXNetPoolType},
		{"blank explicit is unset", "  ", env(EnvPoolType, "fakebare"), "fakebare", EnvPoolType},
	} {
		sel, err := Select(tc.explicit, tc.env)
		require.NoError(t, err, tc.name)
		assert.Equal(t, tc.spec, sel.String(), tc.name)
		assert.Equal(t, tc.source, sel.Source(), tc.name)
	}
}

func TestSelectErrorsNameTheVariable(t *testing.T) {
	for _, tc := range []struct {
		env  func(string) (string, bool)
		want string
	}{
		{env(EnvPoolType, "nosuch"), `GPUALLOC_POOL_TYPE="nosuch": unknown strategy "nosuch" (known: `},
		{env(EnvPoolType, "fakepool:page"), `GPUALLOC_POOL_TYPE="fakepool:page": bad strategy spec "fakepool:page": parameter "page" is not key=value`},
		{env(EnvPoolType, "fakepool:cutof=1"), `GPUALLOC_POOL_TYPE="fakepool:cutof=1": fakepool: unknown parameter "cutof"`},
		{env(EnvMXNetPoolType, "Pooled"), `MXNET_GPU_MEM_POOL_TYPE="Pooled": unknown strategy "Pooled" (known: `},
		{env(EnvMXNetPoolType, "round:cutoff=20"), `MXNET_GPU_MEM_POOL_TYPE="round:cutoff=20": want a strategy name such as Naive, Round or Unpooled (use GPUALLOC_POOL_TYPE for parameters)`},
	} {
		_, err := Select("", tc.env)
		require.Error(t, err)
		assert.Contains(t, err.Error(), tc.want)
	}
	_, err := Select("nosuch:x=1", nil)
	assert.ErrorContains(t, err, `unknown strategy "nosuch"`)
}

func TestMeter(t *testing.T) {
	var m Meter
	m.CountDeviceMalloc(8192)
	m.CountAlloc(100, 4096, false)
	m.CountAlloc(200, 4096, true)
	m.CountFree(100, 4096)
	m.CountDeviceMalloc(4096)
	m.CountDeviceFree(4096)
	m.CountOOM()
	m.CountRetry()
	assert.Equal(t, Stats{
		Requested: 200, Allocated: 4096, Reserved: 8192,
		PeakRequested: 300, PeakAllocated: 8192, PeakReserved: 12288,
		Allocs: 2, Frees: 1, DeviceMallocs: 2, DeviceFrees: 1, DeviceMallocBytes: 12288,
		CacheHits: 1, OOMs: 1, Retries: 1,
	}, m.Stats())
}

func TestErrorsAreDistinct(t *testing.T) {
	assert.False(t, errors.Is(ErrOutOfMemory, ErrInvalidFree))
	assert.Equal(t, uint64(4096+512), Block{Addr: 4096, Size: 512}.End())
}

func TestParamErrorFromNewNamesItsSource(t *testing.T) {
	Register(Strategy{
		Name:   "fakeparamerr",
		Params: []Param{{Name: "limit", Default: "1", Env: []string{"FAKE_LIMIT"}}},
		New: func(Backend, *Params) (Allocator, error) {
			return nil, &ParamError{Key: "limit", Msg: "must be even"}
		},
	})
	p, err := Resolve(Spec{Name: "fakeparamerr"}, env("FAKE_LIMIT", "3"))
	require.NoError(t, err)
	_, err = p.Open(nil)
	assert.EqualError(t, err, `FAKE_LIMIT="3": must be even`)
	p, err = Resolve(Spec{Name: "fakeparamerr", Params: []KeyValue{{"limit", "5"}}}, nil)
	require.NoError(t, err)
	_, err = p.Open(nil)
	assert.EqualError(t, err, `fakeparamerr: limit=5: must be even`)
}

// A variable set but not read, because one before it wins, is reported
// with its value, whatever the value.
func TestIgnoredEnv(t *testing.T) {
	p, err := Resolve(Spec{Name: "fakepool"}, env("FAKE_PAGE", "8192", "FAKE_PAGE_OLD", "not a size"))
	require.NoError(t, err)
	assert.Equal(t, "8192", p.Value("page"))
	assert.Equal(t, []string{"FAKE_PAGE=8192"}, p.FromEnv())
	assert.Equal(t, []string{"FAKE_PAGE_OLD=not a size is ignored: FAKE_PAGE, also set, wins"}, p.IgnoredEnv())

	p, err = Resolve(Spec{Name: "fakepool"}, env("FAKE_PAGE_OLD", "8192", "FAKE_PAGE", " "))
	require.NoError(t, err)
	assert.Empty(t, p.IgnoredEnv(), "a blank variable counts as unset")
	assert.Equal(t, []string{"FAKE_PAGE_OLD=8192"}, p.FromEnv())
}
