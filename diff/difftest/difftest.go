// Package difftest generates PyTorch memory snapshots of small programs
// whose differences are known by construction, for the tests and
// benchmarks of package diff and of simulate diff.
package difftest

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/gpualloc/gpualloc/internal/pickletest"
)

// An Op is one step of a generated program: an allocation of Size
// bytes at Site ("file:line function"), or, with Free set, the free of
// the Free-th allocation (from 1), or, with Step set, an optimizer's
// step: a record_function range Optimizer.step#SGD.step.
type Op struct {
	Site string
	Size int64
	Free int
	Step bool
}

// Snapshot writes a PyTorch snapshot of a program that runs ops on
// device dev from an empty allocator, with the allocator settings conf
// ("" for none): each allocation in a segment of its own, made for it,
// of its size (a multiple of 512), which a free leaves cached; the
// segments are the state after the last entry, as PyTorch dumps them.
// Each entry's stack is one frame, its site.
func Snapshot(dev int, ops []Op, conf string) []byte {
	const base uint64 = 0x7f0000000000
	var entries []any
	var addrs []uint64
	var sizes []int64
	var sites []string
	live := map[int]bool{}
	next := base
	var tm int64 = 1000
	entry := func(action string, addr uint64, size int64, site string) pickletest.Dict {
		tm += 10
		e := pickletest.Entry(action, addr, size, 0, tm)
		file, rest, _ := strings.Cut(site, ":")
		lineText, fn, _ := strings.Cut(rest, " ")
		line, _ := strconv.Atoi(lineText)
		e[len(e)-1] = pickletest.KV{K: "frames", V: []any{pickletest.Dict{{K: "filename", V: file}, {K: "line", V: line}, {K: "name", V: fn}}}}
		return e
	}
	var notes []any
	for _, op := range ops {
		if op.Step {
			for _, stage := range []string{"START", "END"} {
				tm += 10
				notes = append(notes, pickletest.Dict{{K: "stage", V: stage}, {K: "name", V: "Optimizer.step#SGD.step"},
					{K: "device", V: dev}, {K: "time_us", V: tm}})
			}
			continue
		}
		if op.Free > 0 {
			i := op.Free - 1
			entries = append(entries, entry("free_requested", addrs[i], sizes[i], sites[i]), entry("free_completed", addrs[i], sizes[i], sites[i]))
			delete(live, i)
			continue
		}
		addr := next
		next += uint64(op.Size+(2<<20)-1) &^ ((2 << 20) - 1)
		entries = append(entries, entry("segment_alloc", addr, op.Size, op.Site), entry("alloc", addr, op.Size, op.Site))
		live[len(addrs)] = true
		addrs, sizes, sites = append(addrs, addr), append(sizes, op.Size), append(sites, op.Site)
	}
	var segs []any
	for i, a := range addrs {
		state, req := "inactive", int64(0)
		if live[i] {
			state, req = "active_allocated", sizes[i]
		}
		segs = append(segs, pickletest.Segment(dev, a, 0, "large", pickletest.Block(a, sizes[i], req, state)))
	}
	trs := make([][]any, dev+1)
	trs[dev] = entries
	var settings pickletest.Dict
	if conf != "" {
		settings = pickletest.Dict{{K: "PYTORCH_CUDA_ALLOC_CONF", V: conf}}
	}
	snap := pickletest.Snapshot(segs, trs, settings)
	if notes != nil {
		snap = append(snap, pickletest.KV{K: "external_annotations", V: notes})
	}
	return pickletest.Encode(snap, pickletest.Options{Proto: 4, Memo: true})
}

// RankOps is the program of rank k of a generated job of n entries,
// about two per op: a step's activations allocated at a few sites and
// freed, over the parameters live throughout; skew adds bytes to the
// activations of one site.
func RankOps(k, entries int, skew int64) []Op {
	rng := rand.New(rand.NewPCG(uint64(k), 3))
	sites := []string{"model.py:10 embed", "model.py:20 attention", "model.py:30 mlp", "train.py:40 loss", "optim.py:50 step"}
	var ops []Op
	for i := range 8 {
		ops = append(ops, Op{Site: fmt.Sprintf("model.py:%d init", i), Size: 64 << 20})
	}
	var open []int
	allocs := len(ops)
	for len(ops)*2 < entries {
		if len(open) < 16 && rng.IntN(3) > 0 || len(open) == 0 {
			s := rng.IntN(len(sites))
			size := int64(1+rng.IntN(16)) << 20
			if s == 2 {
				size += skew
			}
			ops = append(ops, Op{Site: sites[s], Size: size})
			allocs++
			open = append(open, allocs)
			continue
		}
		j := rng.IntN(len(open))
		ops = append(ops, Op{Free: open[j]})
		open = append(open[:j], open[j+1:]...)
	}
	return ops
}
