package cli

import (
	"strings"

	"github.com/spf13/pflag"
	"gonum.org/v1/plot/vg"

	"github.com/gpualloc/gpualloc/sim/report"
)

// figureFlags are the flags that shape a report's figures: what authors
// change to fit a paper.
type figureFlags struct {
	plotFormat    string
	width, height string
	title         bool
	logY          string
	figures       string
}

func (f *figureFlags) add(fs *pflag.FlagSet) {
	fs.StringVar(&f.plotFormat, "plot-format", "png,svg", "formats of the report's figures: png, svg, pdf, comma-separated")
	fs.StringVar(&f.width, "width", "3.3in", "width of every figure, with a unit: in, cm, mm or pt (7in: a page of a two-column paper)")
	fs.StringVar(&f.height, "height", "", "height of every figure, with a unit (default: each figure as tall as it needs)")
	fs.BoolVar(&f.title, "title", false, "draw each figure's title above it (by default a figure has none, for a paper's own caption)")
	fs.StringVar(&f.logY, "log-y", "auto", "memory axis over time: auto (logarithmic when peaks differ more than 10x), on or off; --log-y alone is on")
	fs.Lookup("log-y").NoOptDefVal = "on"
	fs.StringVar(&f.figures, "figures", "all", "figures to draw, comma-separated: "+strings.Join(report.FigureKinds, ", ")+" (panels: memory over time, a panel per strategy)")
}

// options turns the flags into a report's options.
func (f *figureFlags) options() (report.Options, error) {
	var o report.Options
	var err error
	if o.Formats, err = report.ParseFormats(f.plotFormat); err != nil {
		return o, usagef("--plot-format: %v", err)
	}
	if o.Width, err = parseLength("--width", f.width); err != nil {
		return o, err
	}
	if f.height != "" {
		if o.Height, err = parseLength("--height", f.height); err != nil {
			return o, err
		}
	}
	o.Title = f.title
	switch f.logY {
	case "auto":
		o.LogY = report.ScaleAuto
	case "on":
		o.LogY = report.ScaleLog
	case "off":
		o.LogY = report.ScaleLinear
	default:
		return o, usagef("--log-y %q: want auto, on or off", f.logY)
	}
	if o.Figures, err = report.ParseFigureKinds(f.figures); err != nil {
		return o, usagef("--figures: %v", err)
	}
	return o, nil
}

// parseLength parses the length of a figure: a number and a unit, from 1 in
// to 40 in.
func parseLength(flag, s string) (vg.Length, error) {
	t := strings.TrimSpace(s)
	hasUnit := false
	for _, u := range []string{"in", "cm", "mm", "pt"} {
		hasUnit = hasUnit || strings.HasSuffix(t, u)
	}
	l, err := vg.ParseLength(t)
	if !hasUnit || err != nil || !(l >= vg.Inch && l <= 40*vg.Inch) {
		return 0, usagef("%s %q: want a length from 1in to 40in with a unit, such as 3.3in, 8.4cm or 240pt", flag, s)
	}
	return l, nil
}
