package dataset_test

import (
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/parquet-go/parquet-go"

	"github.com/gpualloc/gpualloc/dataset"
)

func ExampleCreateEvents() {
	dir, err := os.MkdirTemp("", "events")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "events.parquet")

	w, err := dataset.CreateEvents(path)
	if err != nil {
		log.Fatal(err)
	}
	defer w.Abort() // removes the file unless Close succeeded
	e := dataset.Event{Trace: "rank0.pickle", Strategy: "pytorch", TimeUS: -1, Site: "model.py:forward"}
	for i, size := range []int64{4096, 1 << 20, 4096} {
		e.Index, e.Action, e.Size, e.Address = int64(i), "alloc", size, 0x7f0000000000+uint64(i)<<21
		e.Live += size
		e.Allocated += size
		e.Reserved = 2 << 20 * int64(i+1)
		if err := w.Write(&e); err != nil {
			log.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		log.Fatal(err)
	}

	rows, err := parquet.ReadFile[dataset.Event](path)
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range rows {
		fmt.Println(r.Index, r.Action, r.Size, r.Live, r.Reserved)
	}
	// Output:
	// 0 alloc 4096 4096 2097152
	// 1 alloc 1048576 1052672 4194304
	// 2 alloc 4096 1056768 6291456
}

func ExampleWriteTable() {
	type site struct {
		Site  string `parquet:"site,dict"`
		Bytes int64  `parquet:"bytes"`
		Count int64  `parquet:"count"`
	}
	dir, err := os.MkdirTemp("", "sites")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "sites.parquet")
	err = dataset.WriteTable(path, []site{{"model.py:forward", 5 << 30, 12}, {"optim.py:step", 1 << 30, 2}})
	if err != nil {
		log.Fatal(err)
	}
	rows, err := parquet.ReadFile[site](path)
	fmt.Println(rows, err)
	// Output:
	// [{model.py:forward 5368709120 12} {optim.py:step 1073741824 2}] <nil>
}
