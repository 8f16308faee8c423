package traces

import (
	"bytes"
	"embed"
	"io/fs"
	"path"
	"strings"
)

// Most bundled traces come from the workload generators of package
// traces/gen. Each line below regenerates one; a test checks that the files
// match what the generators write now.
//
//go:generate go run ../cmd/simulate gen -o bundled/dynamic.csv.gz --steps 100 --seed 1 dynamic
//go:generate go run ../cmd/simulate gen -o bundled/training.csv.gz --steps 50 --seed 1 training

// bundleRecorded lists the bundled traces that were recorded from real
// models rather than generated, each with the command, run from the
// repository's root, that records it again. Addresses and timestamps change
// from run to run, so they cannot be checked against a fresh recording; the
// versions that made them are in traces/record/VERSIONS.
var bundleRecorded = map[string]string{
	"resnet18-cpu":    "traces/record/record.sh",
	"transformer-cpu": "traces/record/record.sh",
}

//go:embed bundled/*.csv.gz
var bundledFS embed.FS

var bundleDescriptions = map[string]string{
	"dynamic": "GPT-2 small training, batch 4, sequence length drawn from 32..512 at each of 100 steps: " +
		"exact-size caches keep growing, power-of-two buckets reuse",
	"training": "GPT-2 small training with Adam in fp32, batch 4, sequence length 256, 50 steps",
	"resnet18-cpu": "recorded: torchvision resnet18 trained on a CPU with PyTorch, batch 8 of 224x224 images, " +
		"SGD with momentum, 3 steps",
	"transformer-cpu": "recorded: 2-layer transformer encoder (d_model 256) trained on a CPU with PyTorch, batch 8, " +
		"sequence length drawn from 16..256 at each of 16 steps, Adam",
}

// A Bundle is a sample trace embedded in the package.
type Bundle struct {
	Name        string // "training": the file name without .csv.gz
	Description string // one line
	Size        int64  // bytes of the compressed file
	data        []byte
}

// Open returns a reader of the trace, named b.Name in errors.
func (b Bundle) Open() (FileReader, error) {
	return NewReader(bytes.NewReader(b.data), b.Name, Options{})
}

// Bundled returns the bundled sample traces, sorted by name.
func Bundled() []Bundle {
	files, err := fs.Glob(bundledFS, "bundled/*.csv.gz")
	if err != nil {
		panic(err) // the pattern is valid
	}
	var out []Bundle
	for _, f := range files { // sorted by fs.Glob
		data, err := bundledFS.ReadFile(f)
		if err != nil {
			panic(err) // embedded files can be read
		}
		name := strings.TrimSuffix(path.Base(f), ".csv.gz")
		out = append(out, Bundle{Name: name, Description: bundleDescriptions[name], Size: int64(len(data)), data: data})
	}
	return out
}

// LookupBundled returns the bundled trace of the given name.
func LookupBundled(name string) (Bundle, bool) {
	for _, b := range Bundled() {
		if b.Name == name {
			return b, true
		}
	}
	return Bundle{}, false
}
