package dataset_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/format"

	"github.com/gpualloc/gpualloc/dataset"
)

// events returns n events of a made-up replay: two strategies over one
// trace, allocations and frees at a handful of sites, the curves moving
// with them.
func events(n int) []dataset.Event {
	sites := []string{"model.py:forward:12", "optim.py:step:88", "", "data.py:load:7"}
	out := make([]dataset.Event, n)
	var live, reserved int64
	for i := range out {
		size := int64(512 * (1 + i%37))
		action := "alloc"
		if i%3 == 2 {
			action = "free_completed"
			live -= size
		} else {
			live += size
		}
		reserved = max(reserved, live+2<<20)
		t := int64(1_000_000 + 10*i)
		if i%1000 == 999 {
			t = -1
		}
		out[i] = dataset.Event{
			Trace:     "rank0.pickle",
			Device:    int32(i % 2),
			Strategy:  []string{"pytorch", "recorded"}[i%2],
			Index:     int64(i / 2),
			TimeUS:    t,
			Action:    action,
			Size:      size,
			Address:   0x7f0000000000 + uint64(i)*4096 + 1<<63, // above int64's range
			Site:      sites[i%len(sites)],
			Live:      live,
			Allocated: live + int64(i%512),
			Reserved:  reserved,
		}
	}
	return out
}

// writeEvents writes evs to dir/events.parquet and returns the path.
func writeEvents(t testing.TB, dir string, evs []dataset.Event) string {
	t.Helper()
	path := filepath.Join(dir, "events.parquet")
	w, err := dataset.CreateEvents(path)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	for i := range evs {
		if err := w.Write(&evs[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// readBack reads path with parquet-go and checks that it holds evs, in
// order.
func readBack(t *testing.T, path string, evs []dataset.Event) {
	t.Helper()
	got, err := parquet.ReadFile[dataset.Event](path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(evs) {
		t.Fatalf("read %d rows, want %d", len(got), len(evs))
	}
	for i := range evs {
		if got[i] != evs[i] {
			t.Fatalf("row %d: read %+v, want %+v", i, got[i], evs[i])
		}
	}
}

// openParquet opens the Parquet file at path for the rest of the test.
func openParquet(t *testing.T, path string) *parquet.File {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	pf, err := parquet.OpenFile(f, fi.Size())
	if err != nil {
		t.Fatal(err)
	}
	return pf
}

// TestEventsRoundTrip writes more rows than a row group holds and reads
// them back with parquet-go: every row as written, in order, in row
// groups of at most RowGroupRows rows.
func TestEventsRoundTrip(t *testing.T) {
	evs := events(2*dataset.RowGroupRows + 1234)
	path := writeEvents(t, t.TempDir(), evs)

	readBack(t, path, evs)

	pf := openParquet(t, path)
	groups := pf.RowGroups()
	if len(groups) != 3 {
		t.Errorf("%d row groups, want 3", len(groups))
	}
	for i, g := range groups {
		if g.NumRows() > dataset.RowGroupRows {
			t.Errorf("row group %d holds %d rows, more than %d", i, g.NumRows(), dataset.RowGroupRows)
		}
	}
}

// TestEventsSchema holds the file's columns to their Parquet types: the
// names a notebook uses, 64-bit integers (the address unsigned), and
// strings as UTF-8, dictionary-encoded where they repeat.
func TestEventsSchema(t *testing.T) {
	path := writeEvents(t, t.TempDir(), events(5000))
	pf := openParquet(t, path)
	want := map[string]string{
		"trace":           "BYTE_ARRAY STRING dict",
		"device":          "INT32 INT(32,true)",
		"strategy":        "BYTE_ARRAY STRING dict",
		"index":           "INT64 INT(64,true)",
		"time_us":         "INT64 INT(64,true)",
		"action":          "BYTE_ARRAY STRING dict",
		"size":            "INT64 INT(64,true)",
		"address":         "INT64 INT(64,false)",
		"site":            "BYTE_ARRAY STRING dict",
		"live_bytes":      "INT64 INT(64,true)",
		"allocated_bytes": "INT64 INT(64,true)",
		"reserved_bytes":  "INT64 INT(64,true)",
	}
	md := pf.Metadata()
	logical := map[string]string{}
	for _, el := range md.Schema {
		if el.LogicalType.Value != nil {
			logical[el.Name] = el.LogicalType.String()
		}
	}
	var names []string
	for _, c := range md.RowGroups[0].Columns {
		name := strings.Join(c.MetaData.PathInSchema, ".")
		names = append(names, name)
		desc := c.MetaData.Type.String()
		if l := logical[name]; l != "" {
			desc += " " + l
		}
		if slices.Contains(c.MetaData.Encoding, format.RLEDictionary) {
			desc += " dict"
		}
		if w, ok := want[name]; !ok {
			t.Errorf("unexpected column %q (%s)", name, desc)
		} else if desc != w {
			t.Errorf("column %s is %s, want %s", name, desc, w)
		}
	}
	if len(names) != len(want) {
		t.Errorf("columns %v, want %d", names, len(want))
	}
}

// TestAppend joins two files written apart into one, in order.
func TestAppend(t *testing.T) {
	dir := t.TempDir()
	evs := events(5000)
	var parts []string
	for i, part := range [][]dataset.Event{evs[:1234], evs[1234:1234], evs[1234:]} {
		sub := filepath.Join(dir, fmt.Sprint(i))
		if err := os.Mkdir(sub, 0o777); err != nil {
			t.Fatal(err)
		}
		parts = append(parts, writeEvents(t, sub, part))
	}
	path := filepath.Join(dir, "all.parquet")
	w, err := dataset.CreateEvents(path)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	var total int64
	for _, p := range parts {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		fi, _ := f.Stat()
		n, err := w.Append(f, fi.Size())
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		total += n
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if total != int64(len(evs)) {
		t.Errorf("appended %d rows, want %d", total, len(evs))
	}
	readBack(t, path, evs)

	// Not an events file: an error, and the writer refuses what follows.
	w, err = dataset.CreateEvents(filepath.Join(dir, "bad.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	if _, err := w.Append(strings.NewReader("not parquet"), 11); err == nil {
		t.Error("Append of a text: no error")
	}
	if err := w.Close(); err == nil {
		t.Error("Close after a failed Append: no error")
	}
	if _, err := os.Stat(filepath.Join(dir, "bad.parquet")); !os.IsNotExist(err) {
		t.Errorf("a failed Append left its file (%v)", err)
	}
}
