package gpualloc

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func init() {
	Register(Strategy{
		Name: "fakeconf",
		Params: []Param{
			{Name: "conf", Default: "none", Env: []string{"FAKE_CONF"}, Settings: fakeSettings},
			{Name: "n", Default: "1"},
		},
		New: func(Backend, *Params) (Allocator, error) { return &fakePool{}, nil },
	})
}

// fakeSettings reads a syntax of the test's own, which the registry does
// not know: settings "key=value" separated by semicolons.
func fakeSettings(v string) ([]KeyValue, func([]string) string) {
	items := strings.Split(v, ";")
	settings := make([]KeyValue, len(items))
	for i, item := range items {
		k, val, _ := strings.Cut(item, "=")
		settings[i] = KeyValue{k, val}
	}
	return settings, func(values []string) string {
		out := make([]string, len(items))
		for i, kv := range settings {
			out[i] = items[i]
			if values[i] != kv.Value {
				out[i] = kv.Key + "=" + values[i]
			}
		}
		return strings.Join(out, ";")
	}
}

func TestExpandValue(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"24", []string{"24"}},
		{"20..24", []string{"20", "21", "22", "23", "24"}},
		{"0..64/16", []string{"0", "16", "32", "48", "64"}},
		{"0..70/16", []string{"0", "16", "32", "48", "64"}},
		{"5..5", []string{"5"}},
		{"-2..1", []string{"-2", "-1", "0", "1"}},
		{"64|128|inf", []string{"64", "128", "inf"}},
		{"1|4..6|x", []string{"1", "4", "5", "6", "x"}},
		{" 20 .. 22 ", []string{"20", "21", "22"}},
		{"256:1;>:8|2", []string{"256:1;>:8", "2"}},
		{"2.8..2.11", []string{"2.8", "2.9", "2.10", "2.11"}},
		{"2.0..2.4/2|2.9", []string{"2.0", "2.2", "2.4", "2.9"}},
		{"-9223372036854775808..9223372036854775807/9223372036854775807",
			[]string{"-9223372036854775808", "-1", "9223372036854775806"}},
	} {
		got, err := expandValue(tc.in)
		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.want, got, tc.in)
	}
}

func TestExpandValueErrors(t *testing.T) {
	for in, want := range map[string]string{
		"24..20":         `range "24..20": start 24 is above end 20`,
		"20..x":          `range "20..x": end "x" is not an integer`,
		"..4":            `range "..4": start "" is not an integer`,
		"1.5..4":         `range "1.5..4": start "1.5" is not an integer`,
		"2.1..2.x":       `range "2.1..2.x": end "x" is not an integer`,
		"2.9..2.1":       `range "2.9..2.1": start 9 is above end 1`,
		"1..4/0":         `range "1..4/0": step "0" is not a positive integer`,
		"1..4/-1":        `range "1..4/-1": step "-1" is not a positive integer`,
		"1..4/":          `range "1..4/": step "" is not a positive integer`,
		"64||128":        `"64||128": an empty alternative in the list`,
		"|":              `"|": an empty alternative in the list`,
		"0..5000":        `range "0..5000": more than 4096 values`,
		"0..4000|0..200": `range "0..200": more than 4096 values`,
		"-9223372036854775808..9223372036854775807": `range "-9223372036854775808..9223372036854775807": more than 4096 values`,
		"1..2..3": `range "1..2..3": end "2..3" is not an integer`,
	} {
		_, err := expandValue(in)
		assert.EqualError(t, err, want, in)
	}
}

func expandSpec(t *testing.T, spec string, getenv func(string) (string, bool)) ([]string, error) {
	t.Helper()
	sel, err := Select(spec, getenv)
	require.NoError(t, err)
	ps, err := sel.Expand()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range ps {
		out = append(out, p.String())
	}
	return out, nil
}

func TestExpandProduct(t *testing.T) {
	got, err := expandSpec(t, "fakepool:cutoff=20..21,reserve=1|2|3", nil)
	require.NoError(t, err)
	// The strategy's first parameter varies slowest.
	assert.Equal(t, []string{
		"fakepool:page=4096,cutoff=20,reserve=1,strict=false",
		"fakepool:page=4096,cutoff=20,reserve=2,strict=false",
		"fakepool:page=4096,cutoff=20,reserve=3,strict=false",
		"fakepool:page=4096,cutoff=21,reserve=1,strict=false",
		"fakepool:page=4096,cutoff=21,reserve=2,strict=false",
		"fakepool:page=4096,cutoff=21,reserve=3,strict=false",
	}, got)

	// No sweep: the Params itself.
	sel, err := Select("fakepool:cutoff=30", nil)
	require.NoError(t, err)
	ps, err := sel.Expand()
	require.NoError(t, err)
	assert.Equal(t, []*Params{sel}, ps)
}

func TestExpandFromEnvironment(t *testing.T) {
	// GPUALLOC_POOL_TYPE's spec, and a variable that supplies a default.
	got, err := expandSpec(t, "", env(EnvPoolType, "fakepool:cutoff=20|30"))
	require.NoError(t, err)
	assert.Equal(t, []string{"fakepool:page=4096,cutoff=20,reserve=5,strict=false", "fakepool:page=4096,cutoff=30,reserve=5,strict=false"}, got)
	got, err = expandSpec(t, "fakepool", env("FAKE_CUTOFF", "20..24/4"))
	require.NoError(t, err)
	assert.Equal(t, []string{"fakepool:page=4096,cutoff=20,reserve=5,strict=false", "fakepool:page=4096,cutoff=24,reserve=5,strict=false"}, got)

	// Settings vary one by one, in the variable or in the spec, in the
	// syntax that the parameter reads. A value whose comma would not read
	// back is quoted.
	want := []string{
		`fakeconf:conf="a=1;b=x;c=[1,2]",n=1`,
		`fakeconf:conf="a=1;b=y;c=[1,2]",n=1`,
		`fakeconf:conf="a=2;b=x;c=[1,2]",n=1`,
		`fakeconf:conf="a=2;b=y;c=[1,2]",n=1`,
	}
	got, err = expandSpec(t, "fakeconf", env("FAKE_CONF", "a=1..2;b=x|y;c=[1,2]"))
	require.NoError(t, err)
	assert.Equal(t, want, got)
	got, err = expandSpec(t, "fakeconf:conf=a=1|2", nil)
	require.NoError(t, err)
	assert.Equal(t, []string{"fakeconf:conf=a=1,n=1", "fakeconf:conf=a=2,n=1"}, got)
}

func TestExpandRecordsTheSweep(t *testing.T) {
	sel, err := Select("fakepool:cutoff=20|21,reserve=1|2", nil)
	require.NoError(t, err)
	assert.Empty(t, sel.Swept(), "not expanded")
	ps, err := sel.Expand()
	require.NoError(t, err)
	require.Len(t, ps, 4)
	for _, p := range ps {
		assert.Equal(t, []string{"cutoff", "reserve"}, p.Swept())
	}
	assert.Equal(t, []string{"page", "cutoff", "reserve", "strict"}, paramNames(ps[0].Declared()))
}

func paramNames(ps []Param) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Name)
	}
	return out
}

func TestExpandErrorsNameTheParameter(t *testing.T) {
	_, err := expandSpec(t, "fakepool:cutoff=24..20", nil)
	assert.EqualError(t, err, `fakepool: cutoff=24..20: range "24..20": start 24 is above end 20`)
	_, err = expandSpec(t, "", env(EnvPoolType, "fakepool:cutoff=1..x"))
	assert.EqualError(t, err, `GPUALLOC_POOL_TYPE="fakepool:cutoff=1..x": fakepool: cutoff=1..x: range "1..x": end "x" is not an integer`)
	_, err = expandSpec(t, "fakepool", env("FAKE_CUTOFF", "20||24"))
	assert.EqualError(t, err, `FAKE_CUTOFF="20||24": "20||24": an empty alternative in the list`)
	_, err = expandSpec(t, "fakeconf", env("FAKE_CONF", "a=1;b=3..1"))
	assert.EqualError(t, err, `FAKE_CONF="a=1;b=3..1": b: range "3..1": start 3 is above end 1`)
	_, err = expandSpec(t, "fakeconf", env("FAKE_CONF", "a=0..99;b=0..99"))
	assert.EqualError(t, err, `FAKE_CONF="a=0..99;b=0..99": "a=0..99;b=0..99": more than 4096 variants`)
	_, err = expandSpec(t, "fakepool:cutoff=0..99,reserve=0..99", nil)
	assert.EqualError(t, err, `fakepool: reserve=0..99: the variants of fakepool number more than 4096`)

	// A sweep does not open as one allocator.
	sel, err := Select("fakepool:cutoff=20|30", nil)
	require.NoError(t, err)
	_, err = sel.Open(nil)
	assert.EqualError(t, err, `fakepool: cutoff=20|30: a range or list of values names several allocators: open each of Params.Expand`)
}

// expandedSweep checks what any expansion of v gives, unless it failed: at
// least one value and at most maxVariants, and v itself when v is no sweep.
// It reports whether v is a sweep that expanded.
func expandedSweep(t *testing.T, v string, vals []string, err error) bool {
	t.Helper()
	if err != nil {
		return false
	}
	require.NotEmpty(t, vals)
	require.LessOrEqual(t, len(vals), maxVariants)
	if !isSweep(v) {
		require.Equal(t, []string{v}, vals)
		return false
	}
	return true
}

// FuzzExpandValue checks that any value expands or fails cleanly, within
// the bound, and that a range's values are its integers in steps.
func FuzzExpandValue(f *testing.F) {
	for _, s := range []string{"24", "20..24", "0..64/16", "64|128|inf", "1|4..6|x", "24..20", "..", "|", "1..4/0",
		"-9223372036854775808..9223372036854775807", "0..9223372036854775807/4611686018427387904", "a:1|2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		vals, err := expandValue(v)
		if !expandedSweep(t, v, vals, err) {
			return
		}
		for _, x := range vals {
			require.NotContains(t, x, "|")
			require.NotContains(t, x, "..")
			require.NotEmpty(t, x)
		}
		if strings.Contains(v, "|") || !strings.Contains(v, "..") {
			return
		}
		// One range: increasing integers at one step.
		var prev, step int64
		for i, x := range vals {
			n, err := strconv.ParseInt(x, 10, 64)
			require.NoError(t, err)
			if i == 1 {
				step = n - prev
				require.Positive(t, step)
			} else if i > 1 {
				require.Equal(t, step, n-prev)
			}
			prev = n
		}
	})
}

// FuzzExpandSettings checks that any value made of settings expands or
// fails cleanly, within the bound, each variant with as many settings as
// the value.
func FuzzExpandSettings(f *testing.F) {
	for _, s := range []string{"a=64|128;b=True|False", "a=1..3;b=[1,2]", "a=1;;b=2|3", "a=3..1", ";", "a=1|2;"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		vals, err := expandSettings(v, fakeSettings)
		if !expandedSweep(t, v, vals, err) {
			return
		}
		settings, _ := fakeSettings(v)
		for _, x := range vals {
			got, _ := fakeSettings(x)
			require.Len(t, got, len(settings), "%q from %q", x, v)
		}
	})
}
