package gen

import (
	"fmt"
	"maps"
	"slices"

	"github.com/gpualloc/gpualloc"
)

// A model is a GPT-2 style decoder: token and position embeddings, layers
// of pre-norm attention and MLP blocks, a final layer norm and an output
// layer tied to the token embedding.
type model struct {
	layers, hidden, heads, vocab, positions int
}

// models are the presets; small, medium and large have the shapes of GPT-2
// small (124M parameters), medium (355M) and large (774M).
var models = map[string]model{
	"tiny":   {layers: 2, hidden: 128, heads: 4, vocab: 1000, positions: 1024},
	"small":  {layers: 12, hidden: 768, heads: 12, vocab: 50257, positions: 1024},
	"medium": {layers: 24, hidden: 1024, heads: 16, vocab: 50257, positions: 1024},
	"large":  {layers: 36, hidden: 1280, heads: 20, vocab: 50257, positions: 1024},
}

func modelNames() []string {
	names := slices.Collect(maps.Keys(models))
	slices.SortFunc(names, func(a, b string) int { return models[a].layers*models[a].hidden - models[b].layers*models[b].hidden })
	return names
}

// Bytes per element.
const (
	f32  = 4 // activations, weights, gradients, optimizer state
	mask = 1 // dropout masks (bool)
	i64  = 8 // token ids
)

// Speed of the modelled GPU, for timestamps: a kernel takes a launch
// overhead plus the longer of its arithmetic and its memory traffic.
const (
	launchUS      = 5
	flopsPerUS    = 60e6  // 60 TFLOP/s
	bytesPerUS    = 1.5e6 // 1.5 TB/s
	loaderMinUS   = 1500  // wait for the next batch, between steps
	loaderRangeUS = 3000
)

// kernel advances the clock by one kernel's time, with ±5% jitter.
func (e *emitter) kernel(flops float64, bytes int64) {
	t := max(flops/flopsPerUS, float64(bytes)/bytesPerUS)
	t *= 0.95 + 0.1*e.rng.Float64()
	e.now += launchUS + int64(t)
}

// limit bounds what a generated trace may reach: a tensor's size, a
// kernel's arithmetic, the clock in µs. 2^62, so that the few of them that
// an int64 adds up (a kernel's bytes, the clock's steps) never overflow.
const limit = 1 << 62

// checkTrainer returns an error that names the options, the batch and the
// longest sequence length seq (of the flag seqFlag) with the model, whose
// tensors, arithmetic or clock over o.Steps steps would pass limit, nil
// when none would. The largest tensors of a step are its logits
// [batch, seq, vocabulary], its attention scores [batch, heads, seq, seq]
// and its MLP activations [batch, seq, 4 hidden]; its largest products
// those of the output layer and the MLP.
func checkTrainer(o Options, seq int, seqFlag string) error {
	m := models[o.Model]
	B, s, d, h, V := float64(o.Batch), float64(seq), float64(m.hidden), float64(m.heads), float64(m.vocab)
	pos := max(s, float64(m.positions))
	what := fmt.Sprintf("gen: batch %d and %s %d with model %s", o.Batch, seqFlag, seq, o.Model)
	biggest := 0.0
	for _, t := range []struct {
		name  string
		bytes float64
	}{
		{"the logits of a step (batch x seq x vocabulary x 4 bytes)", B * s * V * f32},
		{"the attention scores of a layer (batch x heads x seq x seq x 4 bytes)", B * h * s * s * f32},
		{"an MLP activation (batch x seq x 4 hidden x 4 bytes)", B * s * 4 * d * f32},
		{"the position embedding (seq x hidden x 4 bytes)", pos * d * f32},
	} {
		// A kernel's traffic adds up to 16 of a step's largest tensor.
		if 16*t.bytes > limit {
			return fmt.Errorf("%s: %s would be %.3g bytes, more than the 2^58 bytes a generated tensor may have; lower them", what, t.name, t.bytes)
		}
		biggest = max(biggest, t.bytes)
	}
	flops := max(B*s*d*V, B*s*4*d*d, B*h*s*s*(d/h))
	if 4*flops > limit {
		return fmt.Errorf("%s: a layer's arithmetic would be %.3g multiply-adds, past 2^60; lower them", what, flops)
	}
	// A step's time is at most its kernels (100 a layer, 200 more) each at
	// the slowest kernel's time, and the wait for its batch.
	kernels := float64(100*m.layers + 200)
	stepUS := loaderMinUS + loaderRangeUS + kernels*(launchUS+1.1*max(4*flops/flopsPerUS, 16*biggest/bytesPerUS))
	if stepUS*float64(o.Steps) > limit {
		return fmt.Errorf("gen: steps %d with batch %d and %s %d with model %s: the trace's clock would pass 2^62 µs; lower them", o.Steps, o.Batch, seqFlag, seq, o.Model)
	}
	return nil
}

func runTraining(e *emitter, o Options) {
	t := newTrainer(e, models[o.Model], o.Batch, max(o.Seq, models[o.Model].positions))
	for i := 0; i < o.Steps && e.err == nil; i++ { // a failed write ends it
		t.step(o.Seq, i == 0)
	}
	t.teardown()
}

func runDynamic(e *emitter, o Options) {
	t := newTrainer(e, models[o.Model], o.Batch, max(o.MaxSeq, models[o.Model].positions))
	for i := 0; i < o.Steps && e.err == nil; i++ {
		seq := o.MinSeq + e.rng.IntN(o.MaxSeq-o.MinSeq+1)
		t.step(seq, i == 0)
	}
	t.teardown()
}

// Indices of a layer's parameters, from the layer's first.
const (
	pLN1W = iota
	pLN1B
	pQKVW
	pQKVB
	pProjW
	pProjB
	pLN2W
	pLN2B
	pFC1W
	pFC1B
	pFC2W
	pFC2B
	perLayer
)

// A trainer emits the allocations of training a model with Adam, the way
// PyTorch's autograd and its single-tensor Adam make them.
type trainer struct {
	e     *emitter
	m     model
	batch int64
	pos   int64 // rows of the position embedding

	params []tensor // wte, wpe, perLayer per layer, ln_f weight and bias
	grads  []tensor // .grad of each parameter, id 0 while none
	adam   [][2]tensor
}

// Parameter indices outside the layers.
const (
	pWTE = 0
	pWPE = 1
)

func (t *trainer) layerParam(l, i int) int { return 2 + l*perLayer + i }
func (t *trainer) lnfParam(i int) int      { return 2 + t.m.layers*perLayer + i }

func newTrainer(e *emitter, m model, batch, positions int) *trainer {
	t := &trainer{e: e, m: m, batch: int64(batch), pos: int64(positions)}
	d, V := int64(m.hidden), int64(m.vocab)
	shapes := []int64{V * d, t.pos * d}
	for range m.layers {
		shapes = append(shapes,
			d, d, // ln1
			3*d*d, 3*d, // qkv
			d*d, d, // proj
			d, d, // ln2
			4*d*d, 4*d, // fc1
			d*4*d, d, // fc2
		)
	}
	shapes = append(shapes, d, d) // ln_f
	e.cat = gpualloc.CategoryParameter
	for _, n := range shapes {
		p := e.alloc(n * f32)
		e.kernel(0, 2*n*f32) // initialise
		t.params = append(t.params, p)
	}
	t.grads = make([]tensor, len(t.params))
	return t
}

// grad makes the gradient of parameter i, which becomes its .grad (autograd
// keeps the computed tensor when the parameter has no gradient yet, and adds
// into .grad through a temporary otherwise).
func (t *trainer) grad(i int) {
	n := t.params[i].size
	if t.grads[i].id == 0 {
		t.grads[i] = t.e.allocAs(gpualloc.CategoryGradient, n)
	} else {
		tmp := t.e.temp(n)
		t.e.kernel(0, 3*n)
		t.e.free(tmp)
	}
}

// linear emits the time of a matrix product of an [m,k] by a [k,n] matrix.
func (t *trainer) linear(m, k, n int64) {
	t.e.kernel(2*float64(m*k*n), (m*k+k*n+m*n)*f32)
}

// linearBackward emits the backward of a linear layer from in to out
// features over rows: the product that makes the input's gradient, then
// the weight's gradient (parameter wi), the product that makes it, and the
// bias's (wi+1).
func (t *trainer) linearBackward(rows, in, out int64, wi int) {
	t.linear(rows, out, in)
	t.grad(wi)
	t.linear(in, rows, out)
	t.grad(wi + 1)
}

// normLinearBackward emits the backward of a sublayer's input side, a layer
// norm ln (weights wn, wn+1) of x into a linear layer of out features
// (weights wl, wl+1): from dy, the gradient of the linear layer's output,
// the gradient of the norm's output, of x through the norm, and their sum
// with dres, the gradient the residual path brings to x, which it returns.
// It frees dy, dres and what the forward saved for it.
func (t *trainer) normLinearBackward(rows, out int64, wl, wn int, dy, dres tensor, ln normed, x tensor) tensor {
	e := t.e
	d := int64(t.m.hidden)
	U := rows * d * f32
	dn := e.alloc(U)
	t.linearBackward(rows, d, out, wl)
	e.free(dy, ln.out)
	dxn := t.layerNormBackward(rows, wn)
	e.free(dn, ln.mean, ln.rstd, x)
	dx := e.alloc(U) // residual
	e.kernel(0, 3*U)
	e.free(dres, dxn)
	return dx
}

// layerNorm's saved statistics and the tensors its backward needs.
type normed struct{ out, mean, rstd tensor }

func (t *trainer) layerNorm(rows int64) normed {
	d := int64(t.m.hidden)
	n := normed{out: t.e.alloc(rows * d * f32), mean: t.e.alloc(rows * f32), rstd: t.e.alloc(rows * f32)}
	t.e.kernel(8*float64(rows*d), 2*rows*d*f32)
	return n
}

// layerNormBackward returns the gradient of the input, after making the
// gradients of the weight and bias wi, wi+1 through partial-sum workspaces.
func (t *trainer) layerNormBackward(rows int64, wi int) tensor {
	d := int64(t.m.hidden)
	dx := t.e.alloc(rows * d * f32)
	partW := t.e.temp(32 * d * f32)
	partB := t.e.temp(32 * d * f32)
	t.e.kernel(10*float64(rows*d), 3*rows*d*f32)
	t.grad(wi)
	t.grad(wi + 1)
	t.e.kernel(0, 64*d*f32)
	t.e.free(partW, partB)
	return dx
}

// saved holds what a block's forward keeps for its backward.
type saved struct {
	x                   tensor // the block's input, kept by ln1
	ln1                 normed
	qh, kh, vh          tensor
	probs, pmask, pdrop tensor
	ctx, omask          tensor
	x2                  tensor
	ln2                 normed
	h1, g, hmask        tensor
}

// block emits a transformer block's forward on x and returns its output.
func (t *trainer) block(x tensor, seq int64, sv *saved) tensor {
	e := t.e
	B, s, d, h := t.batch, seq, int64(t.m.hidden), int64(t.m.heads)
	rows := B * s
	U := rows * d * f32      // one activation [B,s,d]
	A := B * h * s * s * f32 // attention scores [B,h,s,s]
	sv.x = x
	sv.ln1 = t.layerNorm(rows)
	qkv := e.temp(3 * U)
	t.linear(rows, d, 3*d)
	sv.qh, sv.kh, sv.vh = e.alloc(U), e.alloc(U), e.alloc(U) // heads made contiguous for bmm
	e.kernel(0, 6*U)
	e.free(qkv)
	scores := e.temp(A)
	t.e.kernel(2*float64(B*h*s*s*(d/h)), 2*U+A)
	sv.probs = e.alloc(A) // softmax(scores/sqrt(dh) + causal mask)
	e.kernel(5*float64(A/f32), 2*A)
	e.free(scores)
	sv.pmask, sv.pdrop = e.alloc(A/f32*mask), e.alloc(A)
	e.kernel(0, 2*A+A/f32)
	ctxh := e.temp(U)
	t.e.kernel(2*float64(B*h*s*s*(d/h)), 2*U+A)
	sv.ctx = e.alloc(U) // heads merged
	e.kernel(0, 2*U)
	e.free(ctxh)
	o := e.temp(U)
	t.linear(rows, d, d)
	sv.omask = e.alloc(U / f32 * mask)
	odrop := e.temp(U)
	e.kernel(0, 2*U+U/f32)
	e.free(o)
	sv.x2 = e.alloc(U)
	e.kernel(0, 3*U)
	e.free(odrop)
	sv.ln2 = t.layerNorm(rows)
	sv.h1 = e.alloc(4 * U)
	t.linear(rows, d, 4*d)
	sv.g = e.alloc(4 * U)
	e.kernel(20*float64(4*U/f32), 8*U)
	h2 := e.temp(U)
	t.linear(rows, 4*d, d)
	sv.hmask = e.alloc(U / f32 * mask)
	hdrop := e.temp(U)
	e.kernel(0, 2*U+U/f32)
	e.free(h2)
	x3 := e.alloc(U)
	e.kernel(0, 3*U)
	e.free(hdrop)
	return x3
}

// blockBackward emits block l's backward from the gradient dout of its
// output, freeing what its forward saved, and returns the gradient of its
// input.
func (t *trainer) blockBackward(l int, dout tensor, seq int64, sv *saved) tensor {
	e := t.e
	B, s, d, h := t.batch, seq, int64(t.m.hidden), int64(t.m.heads)
	rows := B * s
	U := rows * d * f32
	A := B * h * s * s * f32
	p := func(i int) int { return t.layerParam(l, i) }

	dh2 := e.alloc(U) // dropout
	e.kernel(0, 2*U+U/f32)
	e.free(sv.hmask)
	dg := e.alloc(4 * U) // fc2
	t.linearBackward(rows, 4*d, d, p(pFC2W))
	e.free(dh2, sv.g)
	dh1 := e.alloc(4 * U) // gelu
	e.kernel(30*float64(4*U/f32), 12*U)
	e.free(dg, sv.h1)
	// fc1, the second layer norm and the residual
	dx2 := t.normLinearBackward(rows, 4*d, p(pFC1W), p(pLN2W), dh1, dout, sv.ln2, sv.x2)
	do := e.alloc(U) // dropout
	e.kernel(0, 2*U+U/f32)
	e.free(sv.omask)
	dctx := e.alloc(U) // proj
	t.linearBackward(rows, d, d, p(pProjW))
	e.free(do, sv.ctx)
	dctxh := e.alloc(U) // split heads
	e.kernel(0, 2*U)
	e.free(dctx)
	dpdrop, dvh := e.alloc(A), e.alloc(U) // probs @ v
	e.kernel(4*float64(B*h*s*s*(d/h)), 2*A+3*U)
	e.free(dctxh, sv.pdrop, sv.vh)
	dprobs := e.alloc(A) // dropout
	e.kernel(0, 2*A+A/f32)
	e.free(dpdrop, sv.pmask)
	dscores := e.alloc(A) // softmax
	e.kernel(4*float64(A/f32), 3*A)
	e.free(dprobs, sv.probs)
	dqh, dkh := e.alloc(U), e.alloc(U) // q @ k^T
	e.kernel(4*float64(B*h*s*s*(d/h)), A+4*U)
	e.free(dscores, sv.qh, sv.kh)
	dqkv := e.alloc(3 * U) // merge heads
	e.kernel(0, 6*U)
	e.free(dqh, dkh, dvh)
	// qkv, the first layer norm and the residual
	return t.normLinearBackward(rows, 3*d, p(pQKVW), p(pLN1W), dqkv, dx2, sv.ln1, sv.x)
}

// step emits one training step on a batch of sequences of length seq.
func (t *trainer) step(seq int, first bool) {
	e := t.e
	B, s, d, V := t.batch, int64(seq), int64(t.m.hidden), int64(t.m.vocab)
	rows := B * s
	U := rows * d * f32
	L := rows * V * f32 // logits [B,s,V]

	// The batch arrives.
	e.now += loaderMinUS + e.rng.Int64N(loaderRangeUS)
	tokens, labels := e.allocAs(gpualloc.CategoryInput, rows*i64), e.allocAs(gpualloc.CategoryInput, rows*i64)
	e.kernel(0, 2*rows*i64)

	// Embeddings and dropout. What the forward pass keeps for the backward
	// is an activation, what it frees at once a temporary.
	e.cat = gpualloc.CategoryActivation
	emb := e.temp(U)
	e.kernel(0, 2*U)
	x0 := e.temp(U)
	e.kernel(0, 3*U)
	e.free(emb)
	dmask, x := e.alloc(U/f32*mask), e.alloc(U)
	e.kernel(0, 2*U+U/f32)
	e.free(x0)

	// Blocks.
	svs := make([]saved, t.m.layers)
	for l := range svs {
		x = t.block(x, s, &svs[l])
	}

	// Final norm, output layer, loss.
	lnf := t.layerNorm(rows)
	logits := e.temp(L)
	t.linear(rows, d, V)
	lsm := e.alloc(L) // log_softmax
	e.kernel(5*float64(L/f32), 2*L)
	e.free(logits)
	loss, weight := e.alloc(f32), e.alloc(f32) // nll_loss and its total weight
	e.kernel(0, L/V)

	// Backward through the loss and the output layer: autograd's
	// gradients of the activations.
	e.cat = gpualloc.CategoryAutogradDetail
	dloss := e.alloc(f32)
	e.kernel(0, f32)
	dlsm := e.alloc(L)
	e.kernel(0, L)
	e.free(dloss, weight)
	dlogits := e.alloc(L)
	e.kernel(5*float64(L/f32), 3*L)
	e.free(dlsm, lsm)
	dlnf := e.alloc(U)
	t.linear(rows, V, d)
	t.grad(pWTE)
	t.linear(V, rows, d)
	e.free(dlogits, lnf.out)
	dx := t.layerNormBackward(rows, t.lnfParam(0))
	e.free(dlnf, lnf.mean, lnf.rstd, x)

	for l := len(svs) - 1; l >= 0; l-- {
		dx = t.blockBackward(l, dx, s, &svs[l])
	}

	// Embeddings.
	dx0 := e.alloc(U)
	e.kernel(0, 2*U+U/f32)
	e.free(dmask, dx)
	dpos := e.temp(s * d * f32) // sum over the batch
	e.kernel(0, U)
	t.grad(pWPE)
	e.kernel(0, 2*t.params[pWPE].size)
	e.free(dpos)
	t.grad(pWTE) // embedding backward, added into the output layer's gradient
	e.free(dx0)

	// Adam, one parameter at a time; its moments appear at the first step.
	if first {
		t.adam = make([][2]tensor, len(t.params))
	}
	for i, p := range t.params {
		if first {
			t.adam[i] = [2]tensor{e.allocAs(gpualloc.CategoryOptimizerState, p.size), e.allocAs(gpualloc.CategoryOptimizerState, p.size)}
			e.kernel(0, 2*p.size)
		}
		denom := e.temp(p.size) // exp_avg_sq.sqrt() / bias_correction + eps
		e.kernel(0, 3*p.size)
		e.kernel(0, 6*p.size)
		e.free(denom)
	}

	// zero_grad(set_to_none=True), and the step's loss goes.
	for i, g := range t.grads {
		e.free(g)
		t.grads[i] = tensor{}
	}
	e.free(loss, tokens, labels)
}

// teardown frees what lives across steps: the optimizer's state and the
// weights.
func (t *trainer) teardown() {
	for _, m := range t.adam {
		t.e.free(m[0], m[1])
	}
	for _, p := range t.params {
		t.e.free(p)
	}
}
