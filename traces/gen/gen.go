package gen

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/traces"
)

// Options parameterize the workloads. A field left zero takes its default
// (see [DefaultOptions]); a field a workload does not use is ignored. Each
// field is a flag of "simulate gen", named in its comment.
type Options struct {
	Seed   uint64 // --seed: seed of every random choice (default 0)
	Steps  int    // --steps: training steps (training, dynamic; default 50)
	Model  string // --model: model preset: tiny, small, medium, large (training, dynamic; default small)
	Batch  int    // --batch: batch size (training, dynamic; default 4)
	Seq    int    // --seq: sequence length (training; default 256)
	MinSeq int    // --min-seq: shortest sequence length (dynamic; default 32)
	MaxSeq int    // --max-seq: longest sequence length (dynamic; default 512)

	Events  int64 // --events: number of events (random; default 1000000)
	MaxLive int   // --max-live: most allocations live at once (random; default 1000)
	MaxSize int64 // --max-size: largest allocation in bytes (random; default 64 MiB)
}

// DefaultOptions returns the options that zero fields stand for.
func DefaultOptions() Options {
	return Options{
		Seed:    0,
		Steps:   50,
		Model:   "small",
		Batch:   4,
		Seq:     256,
		MinSeq:  32,
		MaxSeq:  512,
		Events:  1_000_000,
		MaxLive: 1000,
		MaxSize: 64 << 20,
	}
}

// withDefaults fills the zero fields of o with their defaults and checks the
// others.
func (o Options) withDefaults() (Options, error) {
	d := DefaultOptions()
	if o.Model == "" {
		o.Model = d.Model
	}
	if o.MaxSeq == 0 {
		o.MaxSeq = d.MaxSeq
	}
	var err error
	count(&err, "steps", &o.Steps, d.Steps)
	count(&err, "batch", &o.Batch, d.Batch)
	count(&err, "seq", &o.Seq, d.Seq)
	count(&err, "min-seq", &o.MinSeq, d.MinSeq)
	if err == nil && o.MaxSeq < o.MinSeq {
		err = fmt.Errorf("gen: bad max-seq %d: must be >= min-seq %d", o.MaxSeq, o.MinSeq)
	}
	count(&err, "events", &o.Events, d.Events)
	count(&err, "max-live", &o.MaxLive, d.MaxLive)
	count(&err, "max-size", &o.MaxSize, d.MaxSize)
	if err != nil {
		return o, err
	}
	if _, ok := models[o.Model]; !ok {
		return o, fmt.Errorf("gen: unknown model %q (known: %s)", o.Model, strings.Join(modelNames(), ", "))
	}
	return o, nil
}

// count fills a zero count option, flag name, with its default, and sets
// *err, unless an earlier option set it, when the count is negative.
func count[T int | int64](err *error, name string, v *T, def T) {
	if *v == 0 {
		*v = def
	}
	if *v < 0 && *err == nil {
		*err = fmt.Errorf("gen: bad %s %d: must be > 0", name, *v)
	}
}

// A Workload describes a generator.
type Workload struct {
	Name    string  // "training"
	Summary string  // one line
	Doc     string  // a paragraph: what the trace is and what it shows
	Params  []Param // the options it uses
	// Categories reports whether the workload knows what each allocation
	// holds (weights, optimizer state, activations, ...): its events carry
	// a [gpualloc.Category], written when the Writer has a category column.
	Categories bool
}

// A Param documents an option a [Workload] uses.
type Param struct {
	Flag    string // flag of "simulate gen": "steps"
	Field   string // field of Options: "Steps"
	Default string
	Doc     string
}

var (
	pSeed    = Param{"seed", "Seed", "0", "seed of every random choice"}
	pSteps   = Param{"steps", "Steps", "50", "training steps"}
	pModel   = Param{"model", "Model", "small", "model preset: " + strings.Join(modelNames(), ", ")}
	pBatch   = Param{"batch", "Batch", "4", "batch size"}
	pSeq     = Param{"seq", "Seq", "256", "sequence length"}
	pMinSeq  = Param{"min-seq", "MinSeq", "32", "shortest sequence length"}
	pMaxSeq  = Param{"max-seq", "MaxSeq", "512", "longest sequence length"}
	pEvents  = Param{"events", "Events", "1000000", "number of events"}
	pMaxLive = Param{"max-live", "MaxLive", "1000", "most allocations live at once"}
	pMaxSize = Param{"max-size", "MaxSize", "64MiB", "largest allocation in bytes"}
)

type workload struct {
	Workload
	run func(e *emitter, o Options)
	// check returns an error that names the options whose trace's sizes,
	// arithmetic or clock would pass [limit], nil when none would.
	check func(o Options) error
}

var workloads = []workload{
	{Workload{
		Name:    "dynamic",
		Summary: "transformer training whose sequence length changes every step",
		Doc: "The training workload with a sequence length drawn uniformly from " +
			"[min-seq, max-seq] at every step, as with variable-length inputs " +
			"without bucketing, so that most activation sizes differ from step to " +
			"step. A pool that caches blocks by exact size (MXNet's Naive) keeps " +
			"every size it has seen and its device allocations grow step after " +
			"step; power-of-two buckets (MXNet's Round) reuse their blocks.",
		Params:     []Param{pSteps, pSeed, pModel, pBatch, pMinSeq, pMaxSeq},
		Categories: true,
	}, runDynamic, func(o Options) error { return checkTrainer(o, o.MaxSeq, "max-seq") }},
	{Workload{
		Name:    "random",
		Summary: "random sizes and lifetimes, for throughput measurements",
		Doc: "Allocations of sizes drawn log-uniformly from 1 byte to max-size, " +
			"each freed at a random later point, with up to max-live of them live " +
			"(half as many on average). Every allocation is freed by the end, " +
			"so the trace has the number of events asked for, rounded down to " +
			"an even number.",
		Params: []Param{pEvents, pSeed, pMaxLive, pMaxSize},
	}, runRandom, checkRandom},
	{Workload{
		Name:    "training",
		Summary: "transformer (GPT-2 style) training loop with Adam, in fp32",
		Doc: "Weights allocated once; per step the input batch, forward " +
			"activations kept for backward layer by layer and freed in reverse " +
			"order during backward, short-lived temporaries inside the ops, " +
			"weight gradients (freed by zero_grad), and Adam's moments, allocated " +
			"at the first step and kept. Sizes are tensor shapes times 4 bytes " +
			"(1 for dropout masks, 8 for token ids); times come from a simple " +
			"model of a GPU's arithmetic and memory speed. The small model at " +
			"batch 4 and sequence 256 peaks at about 3 GiB. Each allocation " +
			"carries its category: parameter (weights), optimizer_state (Adam's " +
			"moments), input (the batch), activation (what the forward pass keeps " +
			"for the backward), temporary (what an operation frees at once), " +
			"gradient (the weights' .grad) and autograd_detail (the gradients of " +
			"activations during backward).",
		Params:     []Param{pSteps, pSeed, pModel, pBatch, pSeq},
		Categories: true,
	}, runTraining, func(o Options) error { return checkTrainer(o, o.Seq, "seq") }},
}

// Workloads returns the workloads, sorted by name.
func Workloads() []Workload {
	out := make([]Workload, len(workloads))
	for i, w := range workloads {
		out[i] = w.Workload
		out[i].Params = slices.Clone(w.Params)
	}
	return out
}

// Columns returns the columns every workload's trace has: op, id, size and
// time_us. A Writer with these columns writes any workload without its
// categories.
func Columns() []traces.Column {
	return []traces.Column{traces.ColOp, traces.ColID, traces.ColSize, traces.ColTime}
}

// ColumnsOf returns the columns of the trace of the workload called name,
// as [WriteFile] writes it: [Columns], and category for a workload that
// knows what its allocations hold ([Workload].Categories).
func ColumnsOf(name string) []traces.Column {
	cols := Columns()
	for _, wl := range workloads {
		if wl.Name == name && wl.Categories {
			cols = append(cols, traces.ColCategory)
		}
	}
	return cols
}

// Generate writes the events of the workload called name to w, and a comment
// naming the workload and its options before them. It does not flush w.
// The output depends only on the workload, the options and the columns of w.
func Generate(w *traces.Writer, name string, opts Options) error {
	i := slices.IndexFunc(workloads, func(wl workload) bool { return wl.Name == name })
	if i < 0 {
		names := make([]string, len(workloads))
		for i, wl := range workloads {
			names[i] = wl.Name
		}
		return fmt.Errorf("gen: unknown workload %q (known: %s)", name, strings.Join(names, ", "))
	}
	wl := workloads[i]
	o, err := opts.withDefaults()
	if err != nil {
		return err
	}
	if err := wl.check(o); err != nil {
		return err
	}
	if err := w.Comment("generated by: simulate gen " + commandLine(wl.Workload, o)); err != nil {
		return err
	}
	e := &emitter{w: w, rng: rand.New(rand.NewPCG(o.Seed, 0x6770_7561_6c6c_6f63))}
	wl.run(e, o)
	return e.err
}

// commandLine returns the flags and workload name that regenerate a trace.
func commandLine(wl Workload, o Options) string {
	var b strings.Builder
	for _, p := range wl.Params {
		var v string
		switch p.Field {
		case "Seed":
			v = strconv.FormatUint(o.Seed, 10)
		case "Steps":
			v = strconv.Itoa(o.Steps)
		case "Model":
			v = o.Model
		case "Batch":
			v = strconv.Itoa(o.Batch)
		case "Seq":
			v = strconv.Itoa(o.Seq)
		case "MinSeq":
			v = strconv.Itoa(o.MinSeq)
		case "MaxSeq":
			v = strconv.Itoa(o.MaxSeq)
		case "Events":
			v = strconv.FormatInt(o.Events, 10)
		case "MaxLive":
			v = strconv.Itoa(o.MaxLive)
		case "MaxSize":
			v = strconv.FormatInt(o.MaxSize, 10)
		}
		fmt.Fprintf(&b, "--%s %s ", p.Flag, v)
	}
	b.WriteString(wl.Name)
	return b.String()
}

// WriteFile writes the workload called name to a new trace file at path with
// [ColumnsOf](name), compressed with gzip if path ends in ".gz"; "-" writes to the
// standard output.
func WriteFile(path, name string, opts Options) (err error) {
	w, err := traces.Create(path, ColumnsOf(name)...)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := w.Close(); err == nil {
			err = cerr
		}
	}()
	return Generate(w, name, opts)
}

// An emitter writes a workload's events, numbering allocations from 1 and
// keeping the clock.
type emitter struct {
	w      *traces.Writer
	rng    *rand.Rand
	now    int64 // µs
	nextID uint64
	cat    gpualloc.Category // of the allocations alloc makes
	err    error
}

// A tensor is an allocation of a workload.
type tensor struct {
	id   uint64
	size int64
}

func (e *emitter) write(ev traces.Event) {
	if e.err == nil {
		e.err = e.w.Write(ev)
	}
}

// alloc emits an allocation of size bytes of the emitter's current
// category.
func (e *emitter) alloc(size int64) tensor { return e.allocAs(e.cat, size) }

// temp emits an allocation of a temporary: a buffer freed inside the
// operation that makes it.
func (e *emitter) temp(size int64) tensor { return e.allocAs(gpualloc.CategoryTemporary, size) }

// allocAs emits an allocation of size bytes of category cat.
func (e *emitter) allocAs(cat gpualloc.Category, size int64) tensor {
	e.nextID++
	t := tensor{e.nextID, size}
	e.write(traces.Event{Op: traces.OpAlloc, Category: cat, ID: t.id, Size: size, TimeUS: e.now})
	return t
}

func (e *emitter) free(ts ...tensor) {
	for _, t := range ts {
		if t.id == 0 {
			panic("gen: free of a tensor not allocated") // a bug in a generator
		}
		e.write(traces.Event{Op: traces.OpFree, ID: t.id, Size: t.size, TimeUS: e.now})
	}
}
