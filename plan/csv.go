package plan

import (
	"bufio"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// PlacementHeader is the header of a placement CSV: MiniMalloc's solution
// format, as its command writes it (converter.cc, ToCsv with a solution):
// the problem's columns and the offset, lower and upper the half-open
// lifetime.
var PlacementHeader = []string{"id", "lower", "upper", "size", "offset"}

// WritePlacements writes placed as CSV with [PlacementHeader], one row a
// buffer in the order of placed.
func WritePlacements(w io.Writer, placed []Placement) error {
	return writeRows(w, PlacementHeader, len(placed), func(i int) (*Buffer, int64) { return &placed[i].Buffer, placed[i].Offset })
}

// WriteProblem writes the buffers of p as a MiniMalloc CSV, the input of
// MiniMalloc's command: the header id,lower,upper,size and a row a buffer,
// in the order of p.
func WriteProblem(w io.Writer, p Problem) error {
	return writeRows(w, PlacementHeader[:4], len(p.Buffers), func(i int) (*Buffer, int64) { return &p.Buffers[i], -1 })
}

// writeRows writes head and n rows of the columns of head, each the buffer
// and offset that row(i) gives.
func writeRows(w io.Writer, head []string, n int, row func(i int) (*Buffer, int64)) error {
	bw := bufio.NewWriter(w)
	bw.WriteString(strings.Join(head, ",") + "\n")
	var line []byte
	for i := range n {
		b, off := row(i)
		line = append(line[:0], b.ID...)
		vals := [...]int64{b.Lower, b.Upper, b.Size, off}
		for _, v := range vals[:len(head)-1] {
			line = append(line, ',')
			line = strconv.AppendInt(line, v, 10)
		}
		line = append(line, '\n')
		if _, err := bw.Write(line); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// ReadPlacements reads a placement CSV: a header naming the columns id,
// lower, upper, size and offset in any order (other columns of MiniMalloc,
// such as alignment, are ignored), then one buffer a line. Errors name the
// input and the line: "NAME:LINE: message".
func ReadPlacements(r io.Reader, name string) ([]Placement, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	cr.ReuseRecord = true
	errorf := func(format string, args ...any) error {
		line, _ := cr.FieldPos(0)
		return fmt.Errorf("%s:%d: %s", name, line, fmt.Sprintf(format, args...))
	}
	head, err := cr.Read()
	if err != nil {
		if err == io.EOF {
			return nil, fmt.Errorf("%s: empty input, want a header %s", name, strings.Join(PlacementHeader, ","))
		}
		return nil, readError(name, err)
	}
	col := map[string]int{}
	for i, h := range head {
		h = strings.ToLower(strings.TrimSpace(h))
		if _, dup := col[h]; dup {
			return nil, errorf("column %q appears twice in header", h)
		}
		col[h] = i
	}
	for _, c := range PlacementHeader {
		if _, ok := col[c]; !ok {
			return nil, errorf("header has no %s column (want %s)", c, strings.Join(PlacementHeader, ","))
		}
	}
	ncol := len(head)
	var out []Placement
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, readError(name, err)
		}
		if len(rec) != ncol {
			return nil, errorf("got %d fields, want %d", len(rec), ncol)
		}
		q := Placement{Buffer: Buffer{ID: strings.TrimSpace(rec[col["id"]])}}
		if q.ID == "" {
			return nil, errorf("missing id")
		}
		for _, f := range []struct {
			name string
			v    *int64
		}{{"lower", &q.Lower}, {"upper", &q.Upper}, {"size", &q.Size}, {"offset", &q.Offset}} {
			s := strings.TrimSpace(rec[col[f.name]])
			v, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				return nil, errorf("bad %s %q: not a number", f.name, s)
			}
			*f.v = v
		}
		out = append(out, q)
	}
}

// readError reports an error of the CSV reader with the input's name.
func readError(name string, err error) error {
	if pe := (*csv.ParseError)(nil); errors.As(err, &pe) {
		return fmt.Errorf("%s:%d: %v", name, pe.Line, pe.Err)
	}
	return fmt.Errorf("%s: %w", name, err)
}
