package tabular

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type row struct {
	Name  string   `json:"name"`
	N     int64    `json:"n"`
	F     float64  `json:"f"`
	Maybe *int64   `json:"maybe"`
	Skip  string   `json:"-"`
	Ratio *float64 `json:"ratio,omitempty"`
}

func TestWriteCSV(t *testing.T) {
	seven, half := int64(7), 0.5
	var b bytes.Buffer
	require.NoError(t, WriteCSV(&b, []row{{"a,b", 1, 0.25, nil, "x", nil}, {"c", -2, 1e21, &seven, "y", &half}}))
	assert.Equal(t, "name,n,f,maybe,ratio\n\"a,b\",1,0.25,,\nc,-2,1e+21,7,0.5\n", b.String())
}

type listRow struct {
	Name  string         `json:"name"`
	Items []row          `json:"items"`
	Tags  map[string]int `json:"tags"`
	N     int64          `json:"n"`
}

// WriteCSVLists writes a list or map as its JSON text, in its place;
// WriteCSV leaves it out.
func TestWriteCSVLists(t *testing.T) {
	rows := []listRow{{"a", []row{{Name: "x", N: 1}}, map[string]int{"k": 2}, 3}, {"b", nil, nil, 4}}
	var b bytes.Buffer
	require.NoError(t, WriteCSVLists(&b, rows))
	assert.Equal(t, "name,items,tags,n\n"+
		"a,\"[{\"\"name\"\":\"\"x\"\",\"\"n\"\":1,\"\"f\"\":0,\"\"maybe\"\":null}]\",\"{\"\"k\"\":2}\",3\n"+
		"b,null,null,4\n", b.String())
	b.Reset()
	require.NoError(t, WriteCSV(&b, rows))
	assert.Equal(t, "name,n\na,3\nb,4\n", b.String())
}

// Text that a spreadsheet would read as a formula is escaped; numbers are
// not text.
func TestWriteCSVFormulas(t *testing.T) {
	var b bytes.Buffer
	rows := []row{{"=1+2", -2, -0.5, nil, "", nil}, {"+x", 0, 0, nil, "", nil}, {"-x", 0, 0, nil, "", nil},
		{"@SUM(A1)", 0, 0, nil, "", nil}, {"\tx", 0, 0, nil, "", nil}, {"a=b", 0, 0, nil, "", nil}}
	require.NoError(t, WriteCSV(&b, rows))
	assert.Equal(t, "name,n,f,maybe,ratio\n'=1+2,-2,-0.5,,\n'+x,0,0,,\n'-x,0,0,,\n'@SUM(A1),0,0,,\n'\tx,0,0,,\na=b,0,0,,\n", b.String())
}

func TestWriteJSON(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, WriteJSON(&b, []row(nil)))
	assert.Equal(t, "[]\n", b.String())
	b.Reset()
	require.NoError(t, WriteJSON(&b, []int{1}))
	assert.Equal(t, "[\n  1\n]\n", b.String())
}

func TestLayout(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, Layout(&b, []string{"NAME", "BYTES", "NOTE"}, []bool{false, true, false},
		[][]string{{"naive", "4.00 KiB", "ok"}, {"roundabout", "12 B", ""}}))
	assert.Equal(t, ""+
		"NAME           BYTES  NOTE\n"+
		"naive       4.00 KiB  ok\n"+
		"roundabout      12 B  \n", b.String())
}

func TestCount(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", -1234: "-1,234"} {
		assert.Equal(t, want, Count(n))
	}
}
