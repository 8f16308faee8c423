package report

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"gonum.org/v1/plot"
)

func labels(ticks []plot.Tick) []string {
	var out []string
	for _, t := range ticks {
		if t.Label != "" {
			out = append(out, t.Label)
		}
	}
	return out
}

func TestTicks(t *testing.T) {
	assert.Equal(t, []string{"0", "0.5", "1", "1.5", "2", "2.5"}, labels(plainTicks{xLabels}.Ticks(0, 2.83)))
	assert.Equal(t, []string{"0", "20", "40", "60"}, labels(plainTicks{yLabels}.Ticks(0, 71.4)))
	assert.Equal(t, []string{"0", "50k", "100k", "150k", "200k"}, labels(siTicks{xLabels}.Ticks(0, 200000)))
	assert.Equal(t, []string{"0%", "25%", "50%", "75%", "100%"}, labels(percentTicks{yLabels}.Ticks(0, 1)))
	assert.Equal(t, []string{"1×", "2×", "5×", "10×", "20×"}, labels(ratioTicks{log: true}.Ticks(1, 20.5)))
	assert.Equal(t, []string{"1×", "2×", "3×", "4×"}, labels(ratioTicks{log: true}.Ticks(1, 4.3)), "three labels at least")
	assert.Equal(t, []string{"1×", "2×", "3×", "4×"}, labels(ratioTicks{}.Ticks(1, 4.3)))
	assert.Equal(t, []string{"1 KiB", "32 KiB", "1 MiB"}, labels(log2Ticks{}.Ticks(9, 23)))
	assert.Equal(t, []string{"2 KiB", "4 KiB", "8 KiB", "16 KiB"}, labels(log2Ticks{}.Ticks(11, 14)))
	for _, r := range [][2]float64{{0, 1e-9}, {0, 3}, {-5, 5}, {0.001, 0.0013}, {1e6, 1e12}} {
		ticks := plainTicks{yLabels}.Ticks(r[0], r[1])
		n := len(labels(ticks))
		assert.True(t, n >= 2 && n <= yLabels, "%v: %d labels", r, n)
		for _, tk := range ticks {
			assert.True(t, tk.Value >= r[0]-1e-12 && tk.Value <= r[1]+1e-12, "%v: tick %v in range", r, tk.Value)
		}
	}
	assert.Empty(t, plainTicks{yLabels}.Ticks(1, 1))
}

func TestFormats(t *testing.T) {
	assert.Equal(t, "950", formatSI(950))
	assert.Equal(t, "1.5M", formatSI(1.5e6))
	assert.Equal(t, "125k", formatSI(125000))
	assert.Equal(t, "0", trimFloat(-0.0000001, 3))
	assert.Equal(t, "1 B", pow2Label(0))
	assert.Equal(t, "512 B", pow2Label(9))
	assert.Equal(t, "1 GiB", pow2Label(30))
	assert.Equal(t, "GiB", byteUnit(68.7*(1<<30)).Name)
	assert.Equal(t, "B", byteUnit(0).Name)
	assert.Equal(t, "µs", timeUnit(90).Name)
	assert.Equal(t, "s", timeUnit(2.8e6).Name)
	assert.Equal(t, "h", timeUnit(50*3600e6).Name)
}
