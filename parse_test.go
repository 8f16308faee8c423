package gpualloc

// Tests of the parsing of sizes ("80GiB") and of strategy specs
// ("round:cutoff=20").

import (
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
	} {
		got, err := ParseSize(tc.in)
		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.want, got, tc.in)
	}
}

func TestParseSizeErrors(t *testing.T) {
	for _, in := range []string{"", "MiB", "abc", "-1", "1.5", "0.3KiB", "1e9", "9223372036854775808", "8EiB", "10XB", "1/2GiB", "0x10"} {
		_, err := ParseSize(in)
		assert.Error(t, err, "%q", in)
	}
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
		"":                    "no strategy name",
		":page=4096":          "no strategy name",
		"round:":              "no parameters",
		"round:page":          `parameter "page" is not key=value`,
		"round:page=":         `parameter "page=" is not key=value`,
		"round:=4096":         `parameter "=4096" is not key=value`,
		"round:page=1,,x=2":   `parameter "" is not key=value`,
		"round:page=1,Page=2": `parameter "Page" given twice`,
	} {
		_, err := ParseSpec(in)
		require.Error(t, err, "%q", in)
		assert.Contains(t, err.Error(), msg, "%q", in)
	}
}
