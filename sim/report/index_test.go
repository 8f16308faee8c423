package report

import (
	"bytes"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/vg"

	"github.com/gpualloc/gpualloc/sim"
)

// The summary table of index.html fits a window 1400 px wide: every
// column, OOMS and the columns after it included, for the widest table a
// report makes (a trace of several devices at a long path, sweep labels,
// timings, the offline plan and the minimum capacity). The width is
// estimated as a browser lays the table out: each column as wide as its
// widest cell in Liberation Sans at the page's sizes, headers wrapping at
// spaces, text cells at their max-width, numbers not at all.
func TestIndexTableFits1400px(t *testing.T) {
	one, ns, bytes8 := 1, 123456.0, int64(8<<30)
	long := "/data/snapshots/pytorch/llama2_7b_finetune_rank0.pickle"
	var results []sim.Result
	for _, spec := range []string{
		"pytorch:conf=none,max_split_size_mb=128,expandable_segments=True,roundup_power2_divisions=auto,garbage_collection_threshold=auto,max_non_split_rounding_mb=auto,memory_fraction=auto",
		"pytorch:conf=none,max_split_size_mb=512,expandable_segments=False,roundup_power2_divisions=auto,garbage_collection_threshold=auto,max_non_split_rounding_mb=auto,memory_fraction=auto",
	} {
		var s sim.Strategy
		require.NoError(t, s.UnmarshalText([]byte(spec)))
		for _, d := range []*int{nil, &one} {
			results = append(results, sim.Result{Trace: long, Strategy: s, Device: d, Events: 123456789,
				PeakRequestedBytes: 70 << 30, PeakAllocatedBytes: 71 << 30, PeakReservedBytes: 79 << 30, DeviceMallocs: 1234567,
				DeviceMallocBytes: 1 << 50, Allocs: 61728394, CacheHits: 61000000, OOMs: 1234567, DeviceFullAllocs: 1,
				AllocHitNSMean: &ns, AllocDeviceNSMean: &ns, DeviceCallNSTotal: &bytes8, OfflineBytes: &bytes8, MinCapacityBytes: &bytes8})
		}
	}
	var b bytes.Buffer
	require.NoError(t, writeIndex(&b, results, nil, nil, Options{}.withDefaults(results)))
	html := b.String()
	em := func(re string) float64 {
		m := regexp.MustCompile(re).FindStringSubmatch(html)
		require.NotNil(t, m, re)
		f, err := strconv.ParseFloat(m[1], 64)
		require.NoError(t, err)
		return f
	}
	const rootPx = 16.0
	bodyPx := em(`body \{[^}]*max-width: ([\d.]+)em`) * rootPx
	bodyPad := em(`body \{[^}]*padding: 0 ([\d.]+)em`) * rootPx
	fontPx := em(`table \{[^}]*font-size: ([\d.]+)em`) * rootPx
	padPx := em(`th, td \{ padding: [\d.]+em ([\d.]+)em`) * fontPx
	textMax := em(`td\.text \{[^}]*max-width: ([\d.]+)em`) * fontPx

	face := font.DefaultCache.Lookup(font.Font{Typeface: "Liberation", Variant: "Sans"}, vg.Length(fontPx))
	width := func(s string) float64 { return float64(face.Width(s)) }
	tab := SummaryTable(sim.WithDevices(results))
	total := 0.0
	for j, h := range tab.Head {
		w := 0.0
		for _, word := range strings.Fields(h) {
			w = max(w, width(word))
		}
		for _, row := range tab.Rows {
			c := width(row[j])
			if !tab.Right[j] {
				c = min(c, textMax)
			}
			w = max(w, c)
		}
		total += w + 2*padPx
	}
	avail := min(bodyPx, 1400-15) - 2*bodyPad // a vertical scroll bar takes 15 px
	require.LessOrEqual(t, total, avail, "the table is %.0f px wide, the page %.0f px at 1400 px", total, avail)
}
