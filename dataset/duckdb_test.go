package dataset_test

import (
	"fmt"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/gpualloc/gpualloc/dataset"
	"github.com/gpualloc/gpualloc/internal/duckdbcheck"
)

// TestDuckDBReadsEvents reads an events file with DuckDB, as a notebook
// would: the columns' types as DuckDB infers them, the row count across
// row groups, aggregates over every row, and single rows' values.
func TestDuckDBReadsEvents(t *testing.T) {
	if duckdbcheck.Modules() == "" {
		duckdbcheck.Query(t, "") // skips, saying why
	}
	evs := events(dataset.RowGroupRows + 777)
	path := writeEvents(t, t.TempDir(), evs)
	from := fmt.Sprintf("read_parquet('%s')", path)

	desc := duckdbcheck.Query(t, "DESCRIBE SELECT * FROM "+from)
	want := [][2]string{
		{"trace", "VARCHAR"}, {"device", "INTEGER"}, {"strategy", "VARCHAR"},
		{"index", "BIGINT"}, {"time_us", "BIGINT"}, {"action", "VARCHAR"},
		{"size", "BIGINT"}, {"address", "UBIGINT"}, {"site", "VARCHAR"},
		{"live_bytes", "BIGINT"}, {"allocated_bytes", "BIGINT"}, {"reserved_bytes", "BIGINT"},
	}
	if len(desc.Rows) != len(want) {
		t.Fatalf("DuckDB sees %d columns %v, want %d", len(desc.Rows), desc.Rows, len(want))
	}
	for i, w := range want {
		if got := [2]string{desc.Rows[i][0].(string), desc.Rows[i][1].(string)}; got != w {
			t.Errorf("column %d: DuckDB sees %v, want %v", i, got, w)
		}
	}

	var (
		sumSize, maxReserved int64
		maxAddress           uint64
		sites                = map[string]bool{}
		untimed              int64
	)
	for _, e := range evs {
		sumSize += e.Size
		maxReserved = max(maxReserved, e.Reserved)
		maxAddress = max(maxAddress, e.Address)
		sites[e.Site] = true
		if e.TimeUS < 0 {
			untimed++
		}
	}
	agg := duckdbcheck.Query(t, "SELECT count(*), sum(size), max(reserved_bytes), max(address), count(DISTINCT site), count(*) FILTER (time_us = -1) FROM "+from)
	wantAgg := []string{
		strconv.Itoa(len(evs)), strconv.FormatInt(sumSize, 10), strconv.FormatInt(maxReserved, 10),
		strconv.FormatUint(maxAddress, 10), strconv.Itoa(len(sites)), strconv.FormatInt(untimed, 10),
	}
	for i, w := range wantAgg {
		if got := fmt.Sprint(agg.Rows[0][i]); got != w {
			t.Errorf("%s: DuckDB reads %s, want %s", agg.Columns[i], got, w)
		}
	}

	// Rows on either side of the row groups' boundary, by their place in
	// the file.
	at := []int{0, 1, dataset.RowGroupRows - 1, dataset.RowGroupRows, len(evs) - 1}
	r := duckdbcheck.Query(t, fmt.Sprintf(
		"SELECT * EXCLUDE (file_row_number) FROM read_parquet('%s', file_row_number = true) WHERE file_row_number IN (%d, %d, %d, %d, %d) ORDER BY file_row_number",
		path, at[0], at[1], at[2], at[3], at[4]))
	if len(r.Rows) != len(at) {
		t.Fatalf("DuckDB reads %d rows at %v, want %d", len(r.Rows), at, len(at))
	}
	for k, i := range at {
		e := evs[i]
		wantRow := []string{e.Trace, fmt.Sprint(e.Device), e.Strategy, fmt.Sprint(e.Index), fmt.Sprint(e.TimeUS),
			e.Action, fmt.Sprint(e.Size), fmt.Sprint(e.Address), e.Site,
			fmt.Sprint(e.Live), fmt.Sprint(e.Allocated), fmt.Sprint(e.Reserved)}
		for j, w := range wantRow {
			if got := fmt.Sprint(r.Rows[k][j]); got != w {
				t.Errorf("row %d, %s: DuckDB reads %s, want %s", i, r.Columns[j], got, w)
			}
		}
	}
}

// TestDuckDBReadsTable reads a table written by WriteTable with DuckDB.
func TestDuckDBReadsTable(t *testing.T) {
	if duckdbcheck.Modules() == "" {
		duckdbcheck.Query(t, "")
	}
	path := filepath.Join(t.TempDir(), "sites.parquet")
	if err := dataset.WriteTable(path, sites); err != nil {
		t.Fatal(err)
	}
	r := duckdbcheck.Query(t, fmt.Sprintf("SELECT site, delta_bytes, comment FROM read_parquet('%s') ORDER BY delta_bytes", path))
	want := [][3]string{
		{"optim.py:step", strconv.Itoa(-(1 << 30)), "shrunk"},
		{"data.py:load", strconv.Itoa(1 << 20), "new"},
		{"model.py:forward", strconv.Itoa(1 << 30), "<nil>"}, // an optional "" is NULL
	}
	if len(r.Rows) != len(want) {
		t.Fatalf("DuckDB reads %d rows, want %d", len(r.Rows), len(want))
	}
	for i, w := range want {
		got := [3]string{fmt.Sprint(r.Rows[i][0]), fmt.Sprint(r.Rows[i][1]), fmt.Sprint(r.Rows[i][2])}
		if got != w {
			t.Errorf("row %d: DuckDB reads %v, want %v", i, got, w)
		}
	}
}
