package param_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/internal/param"
	_ "github.com/gpualloc/gpualloc/strategy/round"
)

func resolve(t *testing.T, spec string) *gpualloc.Params {
	sp, err := gpualloc.ParseSpec(spec)
	require.NoError(t, err)
	p, err := gpualloc.Resolve(sp, nil)
	require.NoError(t, err)
	return p
}

func TestReaderKeepsTheFirstError(t *testing.T) {
	r := param.NewReader(resolve(t, "round:page=big,cutoff=99999999999999999999,reserve=3"))
	assert.Zero(t, r.Size("page"))
	assert.Zero(t, r.Int("cutoff", "too large"))
	assert.Zero(t, r.Int("reserve", "too large"), "no read after an error")
	assert.EqualError(t, r.Err(), `round: page=big: not a size: want bytes or a number with a unit such as MiB`)

	r = param.NewReader(resolve(t, "round:page=8KiB,reserve=3"))
	assert.Equal(t, int64(8192), r.Size("page"))
	assert.Equal(t, 3, r.Int("reserve", "too large"))
	assert.Equal(t, 0, param.Enum(r, "cutoff", func(string) (int, bool) { return 0, false }, "must be a cutoff"))
	assert.Zero(t, param.Enum(r, "cutoff", func(string) (int, bool) { return 7, true }, ""), "no read after an error")
	assert.EqualError(t, r.Err(), "round: cutoff=24: must be a cutoff")
}

func TestOpenReturnsNilOnError(t *testing.T) {
	var p *nilPool
	a, err := param.Open(p, assert.AnError)
	assert.Nil(t, a, "a nil Allocator, not a nil *nilPool in one")
	assert.Equal(t, assert.AnError, err)

	q := &nilPool{}
	a, err = param.Open(q, nil)
	require.NoError(t, err)
	assert.Same(t, q, a)
}

type nilPool struct{ gpualloc.Allocator }

func TestOpener(t *testing.T) {
	built := &nilPool{}
	open := param.Opener(func(r *param.Reader) int64 { return r.Size("page") }, func(_ gpualloc.Backend, page int64) (*nilPool, error) {
		if page != 8192 {
			return nil, assert.AnError
		}
		return built, nil
	})

	a, err := open(nil, resolve(t, "round:page=8KiB"))
	require.NoError(t, err)
	assert.Same(t, built, a)

	a, err = open(nil, resolve(t, "round:page=4KiB"))
	assert.Nil(t, a, "a nil Allocator, not a nil *nilPool in one")
	assert.Equal(t, assert.AnError, err, "the constructor's error")

	a, err = open(nil, resolve(t, "round:page=big"))
	assert.Nil(t, a)
	assert.EqualError(t, err, `round: page=big: not a size: want bytes or a number with a unit such as MiB`, "the read's error, before the constructor")
}

func TestError(t *testing.T) {
	err := param.Error("round", "page", int64(31), "must be at least 32")
	assert.EqualError(t, err, "round: page=31: must be at least 32")
	var pe *gpualloc.ParamError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, gpualloc.ParamError{Key: "page", Msg: "must be at least 32"}, *pe)
	assert.EqualError(t, param.Error("gmlake", "reuse_limit", 0.5, "must be more"), "gmlake: reuse_limit=0.5: must be more")

	p := resolve(t, "round:page=31")
	_, err = p.Open(nil)
	assert.EqualError(t, err, "round: page=31: must be at least 32", "Params.Open names where the value came from")
}

type color uint8

var colorNames = []string{"red", "green"}

func TestEnumNames(t *testing.T) {
	assert.Equal(t, "green", param.Name(colorNames, "color", color(1)))
	assert.Equal(t, "color(2)", param.Name(colorNames, "color", color(2)), "a value with no name")
	for _, tc := range []struct {
		s          string
		exact      bool
		fold       bool
		wantExact  color
		wantFolded color
	}{
		{"green", true, true, 1, 1},
		{"Green", false, true, 0, 1},
		{"RED", false, true, 0, 0},
		{"blue", false, false, 0, 0},
		{"", false, false, 0, 0},
	} {
		c, ok := param.Parse[color](colorNames, tc.s)
		assert.Equal(t, tc.exact, ok, "Parse(%q)", tc.s)
		assert.Equal(t, tc.wantExact, c, "Parse(%q)", tc.s)
		c, ok = param.ParseFold[color](colorNames, tc.s)
		assert.Equal(t, tc.fold, ok, "ParseFold(%q)", tc.s)
		assert.Equal(t, tc.wantFolded, c, "ParseFold(%q)", tc.s)
	}
}
