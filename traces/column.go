package traces

import (
	"strings"

	"github.com/gpualloc/gpualloc"
)

// A Column is a column of the native trace format.
type Column uint8

const (
	ColOp       Column = iota + 1 // "op": alloc or free (required)
	ColID                         // "id": the allocation's identity (required)
	ColSize                       // "size": requested bytes (required on allocs)
	ColStream                     // "stream": the allocation's stream (default 0)
	ColDevice                     // "device": the device index (default 0)
	ColTime                       // "time_us": timestamp in microseconds
	ColCategory                   // "category": what the allocation holds (default unknown)
)

// maxCols is the number of distinct columns.
const maxCols = int(ColCategory)

var columnNames = [...]string{
	ColOp:       "op",
	ColID:       "id",
	ColSize:     "size",
	ColStream:   "stream",
	ColDevice:   "device",
	ColTime:     "time_us",
	ColCategory: "category",
}

// String returns the column's name in a header: "op", "time_us".
func (c Column) String() string {
	if c >= ColOp && c <= ColCategory {
		return columnNames[c]
	}
	return "column?"
}

// columnByName returns the column named s, matched without regard to case,
// or 0.
func columnByName(s string) Column {
	for c := ColOp; c <= ColCategory; c++ {
		if strings.EqualFold(s, columnNames[c]) {
			return c
		}
	}
	return 0
}

// knownColumns lists the column names for error messages.
const knownColumns = "op, id, size, stream, device, time_us, category"

// categoryNames lists the names of the category column's values for error
// messages, in the order of memory_viz's legend: unknown last.
var categoryNames = func() string {
	var names []string
	for c := gpualloc.CategoryUnknown + 1; c < gpualloc.NumCategories; c++ {
		names = append(names, c.String())
	}
	return strings.Join(append(names, gpualloc.CategoryUnknown.String()), ", ")
}()
