package dataset_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/gpualloc/gpualloc/dataset"
	"github.com/gpualloc/gpualloc/internal/dirtest"
)

// TestEventsAtomic: the file appears only at Close, Abort leaves nothing,
// and a file that was there is replaced only by a complete one.
func TestEventsAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "events.parquet")
	evs := events(3000)

	w, err := dataset.CreateEvents(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := range evs {
		if err := w.Write(&evs[i]); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("%s exists before Close (%v)", path, err)
	}
	w.Abort()
	if names := dirtest.Names(t, dir); len(names) != 0 {
		t.Errorf("after Abort the directory holds %v", names)
	}
	if err := w.Write(&evs[0]); err == nil {
		t.Error("Write after Abort: no error")
	}
	if err := w.Close(); err == nil {
		t.Error("Close after Abort: no error")
	}

	if err := os.WriteFile(path, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	w, err = dataset.CreateEvents(path)
	if err != nil {
		t.Fatal(err)
	}
	w.Write(&evs[0])
	w.Abort()
	if b, _ := os.ReadFile(path); string(b) != "old" {
		t.Errorf("Abort changed the file there before: %q", b)
	}

	w, err = dataset.CreateEvents(path)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	for i := range evs {
		w.Write(&evs[i])
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	w.Abort() // after Close: nothing
	if names := dirtest.Names(t, dir); len(names) != 1 || names[0] != "events.parquet" {
		t.Errorf("after Close the directory holds %v", names)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("replaced file's mode %v, want the old file's 0600", fi.Mode().Perm())
	}
	rows, err := parquet.ReadFile[dataset.Event](path)
	if err != nil || len(rows) != len(evs) {
		t.Errorf("read %d rows (%v), want %d", len(rows), err, len(evs))
	}
	if err := w.Write(&evs[0]); err == nil {
		t.Error("Write after Close: no error")
	}
}

// TestCreateEventsError names the path it cannot write.
func TestCreateEventsError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "missing", "events.parquet")
	_, err := dataset.CreateEvents(path)
	if err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("CreateEvents(%s): %v, want an error naming it", path, err)
	}
	if err := dataset.WriteTable(path, []siteRow{{Site: "a"}}); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("WriteTable(%s): %v, want an error naming it", path, err)
	}
}

// siteRow is a row of a table of bytes per site, as a diff writes.
type siteRow struct {
	Site    string `parquet:"site,dict"`
	ABytes  int64  `parquet:"a_bytes"`
	BBytes  int64  `parquet:"b_bytes"`
	Delta   int64  `parquet:"delta_bytes"`
	ACount  int64  `parquet:"a_count"`
	BCount  int64  `parquet:"b_count"`
	Comment string `parquet:"comment,optional"`
}

var sites = []siteRow{
	{"model.py:forward", 4 << 30, 5 << 30, 1 << 30, 10, 12, ""},
	{"optim.py:step", 2 << 30, 1 << 30, -(1 << 30), 3, 2, "shrunk"},
	{"data.py:load", 0, 1 << 20, 1 << 20, 0, 1, "new"},
}

// TestWriteTable reads back a table with parquet-go, and leaves no
// temporary behind.
func TestWriteTable(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sites.parquet")
	if err := dataset.WriteTable(path, sites); err != nil {
		t.Fatal(err)
	}
	got, err := parquet.ReadFile[siteRow](path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(sites) {
		t.Fatalf("read %d rows, want %d", len(got), len(sites))
	}
	for i := range sites {
		if got[i] != sites[i] {
			t.Errorf("row %d: read %+v, want %+v", i, got[i], sites[i])
		}
	}
	if names := dirtest.Names(t, dir); len(names) != 1 {
		t.Errorf("the directory holds %v", names)
	}

	// No rows: still a valid file with the columns.
	empty := filepath.Join(dir, "empty.parquet")
	if err := dataset.WriteTable[siteRow](empty, nil); err != nil {
		t.Fatal(err)
	}
	if got, err := parquet.ReadFile[siteRow](empty); err != nil || len(got) != 0 {
		t.Errorf("empty table: %d rows, %v", len(got), err)
	}
}

// TestWriteTableNotStruct: a row type that is not a struct is an error,
// not a panic, and leaves nothing behind.
func TestWriteTableNotStruct(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "bad.parquet")
	err := dataset.WriteTable(path, []chan int{make(chan int)})
	if err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("WriteTable of channels: %v, want an error naming %s", err, path)
	}
	type withChan struct {
		C chan int `parquet:"c"`
	}
	err = dataset.WriteTable(path, []withChan{{}})
	if err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("WriteTable of a struct with a channel: %v, want an error naming %s", err, path)
	}
	if names := dirtest.Names(t, dir); len(names) != 0 {
		t.Errorf("the directory holds %v", names)
	}
}
