package gpualloc

// Tests of the parsing of sizes ("80GiB") and of strategy specs
// ("round:cutoff=20").

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
	}{
		{"4096", 4096},
		{"0", 0},
		{"512B", 512},
		{"4KiB", 4096},
		{"2MiB", 2 << 20},
		{"2 MiB", 2 << 20},
		{"80GiB", 80 << 30},
		{"1TiB", 1 << 40},
		{"1.5GiB", 3 << 29},
		{"1KB", 1000},
		{"20MB", 20e6},
		{"1.5GB", 1.5e9},
		{"2TB", 2e12},
		{"2mib", 2 << 20},
		{" 8 gib ", 8 << 30},
		{"9223372036854775807", 1<<63 - 1},
		{"5.41GiB", 5808943268}, // 5808943267.84, rounded to the nearest byte
		{"0.3KiB", 307},         // 307.2
		{"0.5KiB", 512},
		{"1.0005KB", 1001}, // a half rounds up
		{"1PiB", 1 << 50},
		{"7EiB", 7 << 60},
		{"2PB", 2e15},
		{"9EB", 9e18},
	} {
		got, err := ParseSize(tc.in)
		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.want, got, tc.in)
	}
}

func TestParseSizeErrors(t *testing.T) {
	for _, tc := range []struct{ in, reason string }{
		{"", "want bytes or a number with a unit"},
		{"MiB", "want bytes or a number with a unit"},
		{"abc", "want bytes or a number with a unit"},
		{"1e9", "want bytes or a number with a unit"},
		{"10XB", "want bytes or a number with a unit"},
		{"1/2GiB", "want bytes or a number with a unit"},
		{"0x10", "want bytes or a number with a unit"},
		{"-1", "negative"},
		{"-5.41GiB", "negative"},
		{"1.5", "not a whole number of bytes"},
		{"1.5B", "not a whole number of bytes"},
		{"9223372036854775808", "more than the largest size, 9223372036854775807 bytes"},
		{"8EiB", "more than the largest size"},
		{"10EB", "more than the largest size"},
		{"99999999999999999999999TiB", "more than the largest size"},
	} {
		_, err := ParseSize(tc.in)
		var se *sizeError
		require.ErrorAs(t, err, &se, "%q", tc.in)
		assert.Equal(t, tc.in, se.Text)
		assert.Contains(t, se.Reason, tc.reason, "%q", tc.in)
		assert.True(t, strings.HasPrefix(err.Error(), fmt.Sprintf("bad size %q: ", tc.in)), err.Error())
	}
}

// FuzzParseSize checks that ParseSize never panics, gives a non-negative
// size or a *sizeError, and reads back what FormatSize's exact form,
// plain bytes, writes.
func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"4096", "5.41GiB", "8EiB", "-1", "1.5", " 2 mib ", "9223372036854775807", "0.0000001KiB"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseSize(s)
		if err != nil {
			var se *sizeError
			require.ErrorAs(t, err, &se)
			return
		}
		require.GreaterOrEqual(t, n, int64(0))
		back, err := ParseSize(strconv.FormatInt(n, 10))
		require.NoError(t, err)
		require.Equal(t, n, back)
	})
}

func TestFormatSize(t *testing.T) {
	for _, tc := range []struct {
		in   int64
		want string
	}{
		{0, "0 B"},
		{512, "512 B"},
		{1023, "1023 B"},
		{1024, "1.00 KiB"},
		{1536, "1.50 KiB"},
		{10 << 20, "10.0 MiB"},
		{100 << 20, "100 MiB"},
		{1<<30 - 1, "1.00 GiB"},
		{80 << 30, "80.0 GiB"},
		{-2048, "-2.00 KiB"},
	} {
		assert.Equal(t, tc.want, FormatSize(tc.in), "%d", tc.in)
	}
}

func TestParseSpec(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Spec
		str  string
	}{
		{"round", Spec{Name: "round"}, "round"},
		{" Round ", Spec{Name: "Round"}, "Round"},
		{"round:cutoff=20,page=4096", Spec{"round", []KeyValue{{"cutoff", "20"}, {"page", "4096"}}}, "round:cutoff=20,page=4096"},
		{"pytorch: max_split_size_mb = 128 ", Spec{"pytorch", []KeyValue{{"max_split_size_mb", "128"}}}, "pytorch:max_split_size_mb=128"},
		// A value in a key:value syntax of its own keeps its commas.
		{"pytorch:conf=max_split_size_mb:128,expandable_segments:True", Spec{"pytorch", []KeyValue{{"conf", "max_split_size_mb:128,expandable_segments:True"}}},
			"pytorch:conf=max_split_size_mb:128,expandable_segments:True"},
		{"pytorch:conf=roundup_power2_divisions:[256:1, 512:2,>:8],expandable_segments:True,memory_fraction=0.5",
			Spec{"pytorch", []KeyValue{{"conf", "roundup_power2_divisions:[256:1,512:2,>:8],expandable_segments:True"}, {"memory_fraction", "0.5"}}},
			"pytorch:conf=roundup_power2_divisions:[256:1,512:2,>:8],expandable_segments:True,memory_fraction=0.5"},
		// Quoted values hold anything; String quotes only what needs it.
		{`x:a="1,b=2", b = "c" ,c=" d"`, Spec{"x", []KeyValue{{"a", "1,b=2"}, {"b", "c"}, {"c", " d"}}}, `x:a="1,b=2",b=c,c=" d"`},
		{`x:a=""`, Spec{"x", []KeyValue{{"a", ""}}}, `x:a=""`},
		{`x:a=1"2`, Spec{"x", []KeyValue{{"a", `1"2`}}}, `x:a=1"2`},
		{`x:a="\"q\""`, Spec{"x", []KeyValue{{"a", `"q"`}}}, `x:a="\"q\""`},
	} {
		got, err := ParseSpec(tc.in)
		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.want, got, tc.in)
		assert.Equal(t, tc.str, got.String())
		again, err := ParseSpec(got.String())
		require.NoError(t, err)
		assert.Equal(t, got, again)
	}
}

func TestParseSpecErrors(t *testing.T) {
	for in, msg := range map[string]string{
		"":                       "no strategy name",
		":page=4096":             "no strategy name",
		"round:":                 "no parameters",
		"round:page":             `parameter "page" is not key=value`,
		"round:page=":            `parameter "page=" is not key=value`,
		"round:=4096":            `parameter "=4096" is not key=value`,
		"round:page=1,,x=2":      `parameter "" is not key=value`,
		"round:page=1,Page=2":    `parameter "Page" given twice`,
		"round:page=4096,cutoff": `parameter "cutoff" is not key=value`,
		"pytorch:a:1":            `parameter "a:1" is not key=value`,
		"round:page=4096,":       `parameter "" is not key=value`,
		`x:a="1,b:2`:             `parameter "a": the quoted value has no closing`,
		`x:a="1"2`:               `parameter "a": text after the quoted value`,
		`x:a="1",b:2`:            `parameter "b:2" is not key=value`,
		"pytorch:conf=a:1,,b:2":  `parameter "" is not key=value`,
	} {
		_, err := ParseSpec(in)
		require.Error(t, err, "%q", in)
		assert.Contains(t, err.Error(), msg, "%q", in)
	}
}

// Every Spec that String writes parses back to itself: specs with values
// that need quoting included.
func TestSpecStringRoundTrip(t *testing.T) {
	for _, v := range []string{"", " ", "a,b", "a:1,b", "a:1,b=2", "a:1,,b:2", "a:1, b:2", `"`, `"x"`, "x\n", "a:1,", ",a:1", "\x00\xff", "a=b"} {
		sp := Spec{Name: "s", Params: []KeyValue{{"k", v}, {"j", "1"}}}
		got, err := ParseSpec(sp.String())
		require.NoError(t, err, "%q", sp.String())
		assert.Equal(t, sp, got, "%q", sp.String())
	}
}

func FuzzParseSpec(f *testing.F) {
	for _, s := range []string{"round", "round:cutoff=20,page=4096", "pytorch:conf=max_split_size_mb:128,expandable_segments:True",
		`x:a="1,b=2",b=c`, `x:a=""`, "x:a=1,b", `x:a="\q"`, "x:a=[1:2,3:4],b=2", "x: a = 1 , b:2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sp, err := ParseSpec(s)
		if err != nil {
			return
		}
		again, err := ParseSpec(sp.String())
		require.NoError(t, err, "%q from %q", sp.String(), s)
		require.Equal(t, sp, again, "%q from %q", sp.String(), s)
		for _, p := range sp.Params {
			// Any value under the parsed keys round-trips too.
			q := Spec{Name: sp.Name, Params: []KeyValue{{p.Key, s}, {p.Key + "x", p.Value}}}
			back, err := ParseSpec(q.String())
			require.NoError(t, err, "%q", q.String())
			require.Equal(t, q, back, "%q", q.String())
		}
	})
}
