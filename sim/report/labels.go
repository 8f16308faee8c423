package report

import (
	"strings"

	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
)

// fitLabel returns a strategy's label s to fit width in sty: s itself
// when it fits; else s broken into lines after the colon that ends its
// name and after its commas, at most maxLines of them, a line still too
// wide (or the last, when more would be needed) cut short with "…".
func fitLabel(sty text.Style, s string, width vg.Length, maxLines int) string {
	if sty.Width(s) <= width || maxLines < 1 {
		return s
	}
	var pieces []string // each ends where a line may break
	rest := s
	if i := strings.IndexByte(rest, ':'); i >= 0 {
		pieces, rest = append(pieces, rest[:i+1]), rest[i+1:]
	}
	for rest != "" {
		i := strings.IndexByte(rest, ',')
		if i < 0 {
			pieces, rest = append(pieces, rest), ""
			break
		}
		pieces, rest = append(pieces, rest[:i+1]), rest[i+1:]
	}
	var lines []string
	line := ""
	for _, p := range pieces {
		if line != "" && sty.Width(line+p) > width {
			lines, line = append(lines, line), ""
		}
		line += p
	}
	lines = append(lines, line)
	if len(lines) > maxLines {
		lines = lines[:maxLines]
		lines[maxLines-1] = strings.TrimRight(lines[maxLines-1], ",") + "…"
	}
	for i, l := range lines {
		lines[i] = cutShort(sty, l, width)
	}
	return strings.Join(lines, "\n")
}

// cutShort returns s, or its start and "…", as wide as width at most.
func cutShort(sty text.Style, s string, width vg.Length) string {
	if sty.Width(s) <= width {
		return s
	}
	r := []rune(strings.TrimSuffix(s, "…"))
	for len(r) > 1 && sty.Width(string(r)+"…") > width {
		r = r[:len(r)-1]
	}
	return string(r) + "…"
}

// labelLines returns the number of lines of the longest of labels.
func labelLines(labels []string) int {
	n := 1
	for _, l := range labels {
		n = max(n, strings.Count(l, "\n")+1)
	}
	return n
}

// The most lines of a strategy's label on an axis, and the widest it may
// be: two fifths of the figure.
const maxLabelLines = 3

func maxLabelWidth(figure vg.Length) vg.Length { return figure * 2 / 5 }

// rowPitch returns the height of a row of a chart whose rows are named by
// labels: pitch, and a line more for each line of the longest label past
// its first.
func rowPitch(pitch vg.Length, labels []string) vg.Length {
	return pitch + vg.Length(labelLines(labels)-1)*(smallPt+1)
}

// panelYAxis is about the width of a panel's y axis, its label and tick
// labels, which a panel's name does not pass.
const panelYAxis = 0.45 * vg.Inch
