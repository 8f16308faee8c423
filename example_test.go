package gpualloc_test

import (
	"fmt"
	"os"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/backend/virtual"
	_ "github.com/gpualloc/gpualloc/strategy/all"
)

// A program lets its users choose the strategy with GPUALLOC_POOL_TYPE or
// MXNet's MXNET_GPU_MEM_POOL_TYPE, in one call.
func ExampleFromEnv() {
	os.Setenv("MXNET_GPU_MEM_POOL_TYPE", "Round")
	defer os.Unsetenv("MXNET_GPU_MEM_POOL_TYPE")

	dev, _ := virtual.New(virtual.Options{Capacity: 16 << 30}) // a virtual 16 GiB GPU
	a, err := gpualloc.FromEnv(dev)
	if err != nil {
		fmt.Println(err)
		return
	}
	b, _ := a.Alloc(5_000_000)
	fmt.Println(a.(gpualloc.Specer).Spec())
	fmt.Println(b.Requested, "bytes asked for,", b.Size, "set aside")
	a.Free(b)
	b, _ = a.Alloc(6_000_000) // same bucket: served from the cache
	st := a.(gpualloc.StatsReporter).Stats()
	fmt.Println("device mallocs:", st.DeviceMallocs, "cache hits:", st.CacheHits)
	// Output:
	// round:page=4096,cutoff=24,reserve=5
	// 5000000 bytes asked for, 8388608 set aside
	// device mallocs: 1 cache hits: 1
}

// A spec names a strategy and its parameters; sizes take units.
func ExampleOpen() {
	dev, _ := virtual.New(virtual.Options{Capacity: 80 << 30})
	a, err := gpualloc.Open("naive:page=8KiB", dev)
	if err != nil {
		fmt.Println(err)
		return
	}
	b, _ := a.Alloc(10_000)
	fmt.Println(b.Size)

	_, err = gpualloc.Open("naive:pagesize=8KiB", dev)
	fmt.Println(err)
	// Output:
	// 16384
	// naive: unknown parameter "pagesize" (known: page, large_round, reserve)
}

// A spec written by a user, in one call to the strategy's parameters:
// every parameter with its effective value, ready to open an allocator or
// to expand into a sweep's variants.
func ExampleSelect_spec() {
	p, err := gpualloc.Select("pytorch:conf=max_split_size_mb:128,expandable_segments:True", nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(p.Value("conf"))
	dev, _ := virtual.New(virtual.Options{Capacity: 16 << 30})
	a, err := p.Open(dev)
	if err != nil {
		fmt.Println(err)
		return
	}
	b, _ := a.Alloc(1 << 20)
	fmt.Println(b.Size, "bytes set aside")

	sweep, _ := gpualloc.Select("round:cutoff=20..22", nil)
	variants, _ := sweep.Expand()
	for _, v := range variants {
		fmt.Println(v.Value("cutoff"))
	}

	_, err = gpualloc.Select("round:cutof=20", nil)
	fmt.Println(err)
	// Output:
	// max_split_size_mb:128,expandable_segments:True
	// 1048576 bytes set aside
	// 20
	// 21
	// 22
	// round: unknown parameter "cutof" (known: page, cutoff, reserve)
}

func ExampleSelect() {
	env := map[string]string{
		"GPUALLOC_POOL_TYPE":      "round:cutoff=20",
		"MXNET_GPU_MEM_POOL_TYPE": "Naive", // GPUALLOC_POOL_TYPE wins
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	sel, _ := gpualloc.Select("", lookup)
	fmt.Println(sel, "from", sel.Source())
	sel, _ = gpualloc.Select("unpooled", lookup) // an explicit spec beats both
	fmt.Println(sel, "from", sel.Source())
	sel, _ = gpualloc.Select("", nil)
	fmt.Println(sel, "from", sel.Source())
	// Output:
	// round:page=4096,cutoff=20,reserve=5 from GPUALLOC_POOL_TYPE
	// unpooled from spec
	// naive:page=4096,large_round=2097152,reserve=5 from default
}

func ExampleParseSize() {
	for _, s := range []string{"4096", "2MiB", "80GiB", "1.5GB"} {
		n, _ := gpualloc.ParseSize(s)
		fmt.Println(s, n, gpualloc.FormatSize(n))
	}
	// Output:
	// 4096 4096 4.00 KiB
	// 2MiB 2097152 2.00 MiB
	// 80GiB 85899345920 80.0 GiB
	// 1.5GB 1500000000 1.40 GiB
}
