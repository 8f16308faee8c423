package gpualloc

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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
