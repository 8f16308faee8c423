package report

import (
	"bytes"
	"html/template"
	"io"
	"strings"

	"github.com/gpualloc/gpualloc/sim"
)

// indexPage is the data of index.html.
type indexPage struct {
	Traces, Strategies int
	Table              Table
	Data               []string
	Overview           []indexFigure
	Sections           []indexSection
}

type indexSection struct {
	Trace, Stem string
	Figures     []indexFigure
}

type indexFigure struct {
	Name, Title, Caption string
	SVG                  template.HTML // the figure inline, when written as SVG
	Img                  string        // else the file to show
	Width                float64       // in CSS pixels, for Img
	Files                []string
}

// writeIndex writes index.html: the summary table and every figure, inline
// when it was written as SVG.
func writeIndex(w io.Writer, results []sim.Result, figs []*Figure, svgs [][]byte, o Options) error {
	page := indexPage{
		Traces: len(traceNames(results)),
		Table:  SummaryTable(sim.WithDevices(results)),
		Data:   []string{SummaryCSV, SummaryJSON, TimeSeriesCSV},
	}
	seen := map[string]bool{}
	for _, r := range results {
		if !seen[r.Strategy.Spec] {
			seen[r.Strategy.Spec] = true
			page.Strategies++
		}
	}
	sections := map[string]*indexSection{}
	for _, t := range traceNames(results) {
		page.Sections = append(page.Sections, indexSection{Trace: t, Stem: o.stem(t)})
	}
	for i := range page.Sections {
		sections[page.Sections[i].Trace] = &page.Sections[i]
	}
	for i, fig := range figs {
		f := indexFigure{Name: fig.Name, Title: fig.Title, Caption: fig.Caption}
		for _, fm := range o.Formats {
			f.Files = append(f.Files, fig.Name+"."+string(fm))
		}
		switch {
		case svgs != nil:
			f.SVG = template.HTML(inlineSVG(svgs[i], fig.Title))
		case containsFormat(o.Formats, PNG):
			f.Img = fig.Name + ".png"
			f.Width = fig.Width.Points() * 96 / 72
		}
		if s, ok := sections[fig.Trace]; ok && fig.Trace != "" {
			s.Figures = append(s.Figures, f)
		} else {
			page.Overview = append(page.Overview, f)
		}
	}
	return indexTemplate.Execute(w, page)
}

// inlineSVG readies an SVG file for a place in an HTML page: without its
// XML prolog, labelled for screen readers, scaled to the page.
func inlineSVG(b []byte, title string) string {
	s := string(b)
	if i := strings.Index(s, "<svg"); i >= 0 {
		s = s[i:]
	}
	var t bytes.Buffer
	template.HTMLEscape(&t, []byte(title))
	return strings.Replace(s, "<svg ", `<svg role="img" aria-label="`+t.String()+`" class="fig" `, 1)
}

var indexTemplate = template.Must(template.New("index").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Replay report</title>
<style>
body { font-family: 'Liberation Sans', Arial, Helvetica, sans-serif; margin: 2em auto; max-width: 86em; padding: 0 1em; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ccc; }
.table { overflow-x: auto; max-width: 100%; }
table { border-collapse: collapse; font-size: 0.72em; }
th, td { padding: 0.2em 0.25em; border-bottom: 1px solid #e4e4e4; white-space: nowrap; }
th { text-align: left; vertical-align: bottom; white-space: normal; }
td.text { white-space: normal; overflow-wrap: anywhere; max-width: 11em; }
.num { text-align: right; font-variant-numeric: tabular-nums; }
.figs { display: flex; flex-wrap: wrap; gap: 1.5em; }
figure { margin: 0; width: 30em; max-width: 100%; }
svg.fig, img.fig { width: 100%; height: auto; border: 1px solid #eee; }
figcaption { font-size: 0.85em; margin-top: 0.4em; }
figcaption .files { color: #666; }
dt { font-weight: bold; margin-top: 0.5em; }
</style>
</head>
<body>
<h1>Replay report</h1>
<p>{{.Traces}} trace{{if ne .Traces 1}}s{{end}} × {{.Strategies}} strateg{{if eq .Strategies 1}}y{{else}}ies{{end}}.
Data: {{range $i, $f := .Data}}{{if $i}}, {{end}}<a href="{{$f}}">{{$f}}</a>{{end}}.
Traces: {{range $i, $s := .Sections}}{{if $i}}, {{end}}<a href="#{{$s.Stem}}">{{$s.Trace}}</a>{{end}}.</p>
<div class="table"><table>
<thead><tr>{{range $i, $h := .Table.Head}}<th{{if index $.Table.Right $i}} class="num"{{end}}>{{$h}}</th>{{end}}</tr></thead>
<tbody>
{{range .Table.Rows}}<tr>{{range $i, $c := .}}<td class="{{if index $.Table.Right $i}}num{{else}}text{{end}}">{{$c}}</td>{{end}}</tr>
{{end}}</tbody>
</table></div>
{{range .Table.Notes}}<p class="note">{{.}}</p>
{{end}}
{{define "figure"}}<figure id="{{.Name}}">
{{if .SVG}}{{.SVG}}{{else if .Img}}<img class="fig" src="{{.Img}}" alt="{{.Title}}" style="max-width: {{.Width}}px">{{end}}
<figcaption><b>{{.Title}}.</b> {{.Caption}} <span class="files">{{range $i, $f := .Files}}{{if $i}} · {{end}}<a href="{{$f}}">{{$f}}</a>{{end}}</span></figcaption>
</figure>
{{end}}
{{if .Overview}}<div class="figs">
{{range .Overview}}{{template "figure" .}}{{end}}</div>
{{end}}
{{range .Sections}}<h2 id="{{.Stem}}">{{.Trace}}</h2>
<div class="figs">
{{range .Figures}}{{template "figure" .}}{{end}}</div>
{{end}}
<h2>Definitions</h2>
<dl>
<dt>lower bound</dt><dd>The peak of the bytes requested by live allocations: what any strategy needs at least.</dd>
<dt>peak reserved</dt><dd>The peak of the bytes held from the device, in blocks handed out and in the strategy's cache.</dd>
<dt>overhead</dt><dd>Peak reserved / lower bound (1× is ideal): the same ratio in the table, in summary.json and summary.csv (overhead) and in the figures.</dd>
<dt>fragmentation</dt><dd>1 − lower bound / peak reserved (GMLake's definition; 0 is ideal). Over time, the same within each bucket of events.</dd>
<dt>free fragmentation</dt><dd>1 − largest free block / free bytes, just after reserved memory peaked (RMM's and TensorFlow's).</dd>
<dt>series</dt><dd>Figures over time and timeseries.csv show buckets of consecutive events: the largest value within each bucket, so that no peak is lost (timeseries.csv also has the smallest).</dd>
</dl>
</body>
</html>
`))
