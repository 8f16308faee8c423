// Package tabular writes rows for people and for programs: aligned text
// tables, CSV and JSON of structs named by their JSON tags, and counts with
// thousands separators. The command and the report package share it, so
// that a table or a CSV file reads the same wherever it is written.
package tabular

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Layout writes rows in aligned columns under head, two spaces apart: a
// column whose right is true (a number) aligned right, the others left.
func Layout(w io.Writer, head []string, right []bool, rows [][]string) error {
	width := make([]int, len(head))
	for _, r := range append([][]string{head}, rows...) {
		for i, c := range r {
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	var b strings.Builder
	line := func(r []string) {
		for i, c := range r {
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(c))
			if i > 0 {
				b.WriteString("  ")
			}
			switch {
			case right[i]:
				b.WriteString(pad + c)
			case i < len(r)-1:
				b.WriteString(c + pad)
			default:
				b.WriteString(c) // no trailing spaces
			}
		}
		b.WriteString("\n")
	}
	line(head)
	for _, r := range rows {
		line(r)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteJSON writes v as indented JSON, an empty slice as [] rather than
// null.
func WriteJSON(w io.Writer, v any) error {
	if rv := reflect.ValueOf(v); rv.Kind() == reflect.Slice && rv.IsNil() {
		v = []struct{}{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// WriteCSV writes rows of a struct type as CSV with a header: one column
// per field with a JSON name, named and ordered as in the JSON, but for
// lists and maps, which have no cell; a nil pointer (null in JSON) is an
// empty cell. Numbers are written as JSON writes them, and text as
// [TextCell] escapes it.
func WriteCSV[T any](w io.Writer, rows []T) error {
	return writeCSV(w, rows, false)
}

// WriteCSVLists writes rows as [WriteCSV] does, but with a column for each
// list and map too: its JSON text, as [TextCell] escapes it.
func WriteCSVLists[T any](w io.Writer, rows []T) error {
	return writeCSV(w, rows, true)
}

func writeCSV[T any](w io.Writer, rows []T, lists bool) error {
	cw := csv.NewWriter(w)
	typ := reflect.TypeFor[T]()
	var head []string
	var fields []int
	for i := range typ.NumField() {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
		k := typ.Field(i).Type.Kind()
		if name == "" || name == "-" || !typ.Field(i).IsExported() || !lists && (k == reflect.Slice || k == reflect.Map) {
			continue
		}
		head = append(head, name)
		fields = append(fields, i)
	}
	if err := cw.Write(head); err != nil {
		return err
	}
	rec := make([]string, len(fields))
	for _, r := range rows {
		v := reflect.ValueOf(r)
		for j, i := range fields {
			rec[j] = cell(v.Field(i))
		}
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

func cell(f reflect.Value) string {
	if f.Kind() == reflect.Pointer {
		if f.IsNil() {
			return ""
		}
		f = f.Elem()
	}
	switch f.Kind() {
	case reflect.Float32, reflect.Float64:
		return strconv.FormatFloat(f.Float(), 'g', -1, 64)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.FormatInt(f.Int(), 10)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return strconv.FormatUint(f.Uint(), 10)
	case reflect.Bool:
		return strconv.FormatBool(f.Bool())
	case reflect.Slice, reflect.Map:
		b, _ := json.Marshal(f.Interface()) // empty where JSON cannot hold it
		return TextCell(string(b))
	}
	return TextCell(fmt.Sprint(f.Interface()))
}

// TextCell returns a CSV cell of text that a spreadsheet reads as text:
// a cell that starts with '=', '+', '-', '@', a tab or a carriage return
// (a trace named "=cmd|...", from its file's name) would be read as a
// formula, so it gets a leading "'", as OWASP's advice on CSV injection
// has it; any other text is as it is. Numbers are never text cells: -2
// stays -2.
func TextCell(s string) string {
	if s != "" && strings.IndexByte("=+-@\t\r", s[0]) >= 0 {
		return "'" + s
	}
	return s
}

// Count formats n with thousands separators: 1,234,567.
func Count(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
