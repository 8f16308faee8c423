package report

import (
	"math"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
)

// A unit scales a quantity for an axis: values are divided by Size and the
// axis label names the unit.
type unit struct {
	Name string
	Size float64
}

var byteUnits = []unit{
	{"B", 1}, {"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"PiB", 1 << 50},
}

// byteUnit returns the largest binary unit of which max is at least one.
func byteUnit(max float64) unit {
	u := byteUnits[0]
	for _, b := range byteUnits[1:] {
		if max >= b.Size {
			u = b
		}
	}
	return u
}

// timeUnit returns the unit in which a span of microseconds reads best.
func timeUnit(spanUS float64) unit {
	switch {
	case spanUS < 1e3:
		return unit{"µs", 1}
	case spanUS < 1e6:
		return unit{"ms", 1e3}
	case spanUS < 600e6:
		return unit{"s", 1e6}
	case spanUS < 36000e6:
		return unit{"min", 60e6}
	}
	return unit{"h", 3600e6}
}

// niceTicks returns labelled ticks at a round step (1, 2, 2.5 or 5 times
// a power of ten) between min and max, as many as fit in at most n labels,
// with label formatting each; unlabelled minor ticks halve the step.
func niceTicks(min, max float64, n int, label func(float64) string) []plot.Tick {
	if !(max > min) || n < 2 {
		return nil
	}
	span := max - min
	mag := math.Pow10(int(math.Floor(math.Log10(span / float64(n)))))
	var step float64
	for _, m := range []float64{1, 2, 2.5, 5, 10, 20} {
		step = m * mag
		if math.Floor(max/step)-math.Ceil(min/step)+1 <= float64(n) {
			break
		}
	}
	var ticks []plot.Tick
	for i := math.Ceil(min/step - 1e-9); i*step <= max+step*1e-9; i++ {
		v := i * step
		if math.Abs(v) < step*1e-9 {
			v = 0
		}
		ticks = append(ticks, plot.Tick{Value: v, Label: label(v)})
		if m := v + step/2; m <= max {
			ticks = append(ticks, plot.Tick{Value: m})
		}
	}
	if first := math.Ceil(min/step-1e-9) * step; first-step/2 >= min {
		ticks = append(ticks, plot.Tick{Value: first - step/2})
	}
	return ticks
}

// Label counts of axes: a column-wide x axis holds six labels, a y axis
// five.
const (
	xLabels = 6
	yLabels = 5
)

// siTicks label an axis with SI suffixes: 0, 50k, 1.5M.
type siTicks struct{ n int }

func (t siTicks) Ticks(min, max float64) []plot.Tick { return niceTicks(min, max, t.n, formatSI) }

// formatSI formats v with an SI suffix and at most three significant
// digits: 950, 12k, 1.5M, 2G.
func formatSI(v float64) string {
	a := math.Abs(v)
	suffix, div := "", 1.0
	switch {
	case a >= 1e12:
		suffix, div = "T", 1e12
	case a >= 1e9:
		suffix, div = "G", 1e9
	case a >= 1e6:
		suffix, div = "M", 1e6
	case a >= 1e3:
		suffix, div = "k", 1e3
	}
	return trimFloat(v/div, 3) + suffix
}

// trimFloat formats v with at most prec significant digits and no
// trailing zeros.
func trimFloat(v float64, prec int) string {
	s := strconv.FormatFloat(v, 'f', max(0, prec-1-int(math.Floor(math.Log10(math.Max(math.Abs(v), 1))))), 64)
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	if s == "-0" {
		s = "0"
	}
	return s
}

// plainTicks label an axis with plain numbers: 0, 0.5, 1.
type plainTicks struct{ n int }

func (t plainTicks) Ticks(min, max float64) []plot.Tick {
	return niceTicks(min, max, t.n, func(v float64) string { return trimFloat(v, 6) })
}

// percentTicks label fractions as percentages: 0%, 25%, 50%.
type percentTicks struct{ n int }

func (t percentTicks) Ticks(min, max float64) []plot.Tick {
	return niceTicks(min, max, t.n, func(v float64) string { return trimFloat(v*100, 4) + "%" })
}

// log2Ticks mark the powers of two of a log2-scaled byte axis (the values
// are exponents), labelled in binary units at a step that leaves room
// between labels: 1 KiB, 32 KiB, 1 MiB.
type log2Ticks struct{}

func (log2Ticks) Ticks(min, max float64) []plot.Tick {
	lo, hi := int(math.Floor(min)), int(math.Ceil(max))
	step := 1
	for _, s := range []int{1, 2, 5, 10, 20} {
		step = s
		if (hi-lo)/s <= 5 {
			break
		}
	}
	var ticks []plot.Tick
	for k := lo; k <= hi; k++ {
		t := plot.Tick{Value: float64(k)}
		if k%step == 0 || step == 5 && k%10 == 5 {
			t.Label = pow2Label(k)
		}
		ticks = append(ticks, t)
	}
	return ticks
}

// pow2Label names 2^k bytes: "1 B", "512 B", "4 KiB", "1 GiB".
func pow2Label(k int) string {
	if k < 0 {
		return ""
	}
	u := byteUnits[min(k/10, len(byteUnits)-1)]
	return strconv.FormatFloat(math.Ldexp(1, k)/u.Size, 'f', -1, 64) + " " + u.Name
}

// ratioTicks label a ratio axis with a multiplication sign, on a linear or
// logarithmic scale: 1×, 2×, 5×, 10×.
type ratioTicks struct{ log bool }

func (t ratioTicks) Ticks(min, max float64) []plot.Tick {
	label := func(v float64) string { return trimFloat(v, 4) + "×" }
	if !t.log {
		return niceTicks(min, max, xLabels, label)
	}
	return logTicks(min, max, label)
}

// plainLogTicks mark a logarithmic axis of plain numbers.
type plainLogTicks struct{}

func (plainLogTicks) Ticks(min, max float64) []plot.Tick {
	return logTicks(min, max, func(v float64) string { return trimFloat(v, 4) })
}

// logTicks marks a logarithmic axis from min to max (both > 0).
func logTicks(min, max float64, label func(float64) string) []plot.Tick {
	// Every multiple of a power of ten in range, labelled at 1, 2 and 5,
	// or at each one when that would give fewer than three labels.
	var ticks []plot.Tick
	labelled := 0
	for mag := math.Pow10(int(math.Floor(math.Log10(min)))); mag <= max; mag *= 10 {
		for m := 1.0; m <= 9; m++ {
			if v := m * mag; v >= min*(1-1e-9) && v <= max*(1+1e-9) {
				t := plot.Tick{Value: v}
				if m == 1 || m == 2 || m == 5 {
					t.Label = label(v)
					labelled++
				}
				ticks = append(ticks, t)
			}
		}
	}
	if labelled < 3 {
		for i := range ticks {
			ticks[i].Label = label(ticks[i].Value)
		}
	}
	return ticks
}
