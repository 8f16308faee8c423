package snapshot_test

import (
	"bufio"
	"container/heap"
	"encoding/binary"
	"io"
	"math/rand/v2"
	"strconv"
)

// genOptions shape a generated snapshot.
type genOptions struct {
	Devices int // devices, each with its own trace
	Events  int // trace entries per device
	Slots   int // 20 MiB segments per device, each holding one block at a time
	Frames  int // distinct frame dicts
	Stacks  int // distinct stacks, each of 40 to 90 of the frames
	Pools   bool
	Seed    uint64
}

// genSnapshot writes a snapshot as PyTorch's _dump_snapshot does (protocol
// 4, frames of 64 KiB, every dict and list memoized, each entry listing
// its frames as memo references to frame dicts shared by all entries) and
// consistent with PyTorch's allocator: each device allocates its segments
// as an alloc needs one, then allocates and frees whole 20 MiB blocks in
// them, best fit first; the segments are the state after the last entry. It returns the bytes
// written.
func genSnapshot(w io.Writer, o genOptions) (int64, error) {
	g := &gen{w: bufio.NewWriterSize(w, 1<<20), memo: map[string]uint32{}}
	rng := rand.New(rand.NewPCG(o.Seed, 7))
	stacks := make([][]int, o.Stacks)
	for i := range stacks {
		n := 40 + rng.IntN(51)
		stacks[i] = make([]int, n)
		for j := range stacks[i] {
			stacks[i][j] = rng.IntN(o.Frames)
		}
	}
	frameMemo := make([]int64, o.Frames)
	for i := range frameMemo {
		frameMemo[i] = -1
	}
	const seg = 20 << 20
	base := func(dev, slot int) uint64 { return 0x7f0000000000 + uint64(dev)<<36 + uint64(slot)*seg }
	// Run the traces first for their end states; the generator is
	// deterministic, so the second run writes the same entries.
	type entry struct {
		action string
		addr   uint64
		size   int64
		stack  int
	}
	traceOf := func(dev int, emit func(entry)) ([]int64, []bool) {
		r := rand.New(rand.NewPCG(o.Seed+uint64(dev), 11))
		live := make([]int64, o.Slots) // requested size, 0 when free
		made := make([]bool, o.Slots)  // the segment was allocated
		// Segments are made in address order, so the free slots are the
		// free made ones (a heap, lowest first) and those from unmade on.
		free := &slotHeap{}
		unmade := 0
		for n := 0; n < o.Events; {
			s := r.IntN(o.Slots)
			st := r.IntN(o.Stacks)
			if live[s] == 0 || r.IntN(2) == 0 {
				// An alloc takes the cached block PyTorch's best fit
				// takes, the lowest free one (all are 20 MiB), else a
				// new segment; a free, a random live block.
				switch {
				case free.Len() > 0:
					s = (*free)[0]
				case unmade < o.Slots:
					s = unmade
				default:
					s = r.IntN(o.Slots)
				}
			}
			if live[s] == 0 {
				if made[s] {
					heap.Pop(free)
				} else {
					unmade++
					// PyTorch records the segment_alloc right before
					// the alloc it serves.
					made[s] = true
					emit(entry{"segment_alloc", base(dev, s), seg, st})
					if n++; n == o.Events {
						break
					}
				}
				live[s] = seg - 512*int64(1+r.IntN(1000))
				emit(entry{"alloc", base(dev, s), live[s], st})
				n++
				continue
			}
			emit(entry{"free_requested", base(dev, s), live[s], st})
			n++
			if n < o.Events {
				emit(entry{"free_completed", base(dev, s), live[s], st})
				n++
				live[s] = 0
				heap.Push(free, s)
			} else {
				live[s] = -live[s] // pending free at the end
			}
		}
		return live, made
	}
	g.raw(0x80, 4)
	g.raw('}')
	g.put()
	g.op('(')
	g.str("segments")
	g.op(']')
	g.put()
	g.op('(')
	for dev := range o.Devices {
		live, made := traceOf(dev, func(entry) {})
		for s := range o.Slots {
			if !made[s] {
				continue
			}
			g.op('}')
			g.put()
			g.op('(')
			g.str("device")
			g.int(int64(dev))
			g.str("address")
			g.int(int64(base(dev, s)))
			g.str("total_size")
			g.int(seg)
			// The totals PyTorch writes: the one block's size when it is
			// allocated, or active (pending free too), and its request.
			var allocated, active, requested int64
			if live[s] != 0 {
				active, requested = seg, max(live[s], -live[s])
			}
			if live[s] > 0 {
				allocated = seg
			}
			g.str("allocated_size")
			g.int(allocated)
			g.str("active_size")
			g.int(active)
			g.str("requested_size")
			g.int(requested)
			g.str("stream")
			g.int(0)
			g.str("segment_type")
			g.str("large")
			g.str("segment_pool_id")
			pool := int64(0)
			if o.Pools && s%2 == 1 {
				pool = 1
			}
			g.int(pool)
			g.int(pool)
			g.raw(0x86) // TUPLE2
			g.put()
			g.str("is_expandable")
			g.raw(0x89)
			g.str("blocks")
			g.op(']')
			g.put()
			g.op('}')
			g.put()
			g.op('(')
			g.str("address")
			g.int(int64(base(dev, s)))
			g.str("size")
			g.int(seg)
			state, req := "inactive", int64(0)
			switch {
			case live[s] > 0:
				state, req = "active_allocated", live[s]
			case live[s] < 0:
				state, req = "active_pending_free", -live[s]
			}
			g.str("requested_size")
			g.int(req)
			g.str("state")
			g.str(state)
			g.str("frames")
			g.op(']')
			g.put()
			g.op('u')
			g.op('a') // APPEND: the segment's one block
			g.str("frames")
			g.op(']')
			g.put()
			g.op('u')
		}
	}
	g.op('e')
	g.str("device_traces")
	g.op(']')
	g.put()
	g.op('(')
	for dev := range o.Devices {
		g.op(']')
		g.put()
		n := 0
		t := int64(1_700_000_000_000_000)
		traceOf(dev, func(e entry) {
			if n%1000 == 0 {
				if n > 0 {
					g.op('e')
				}
				g.op('(')
			}
			n++
			t += 13
			g.op('}')
			g.put()
			g.op('(')
			g.str("action")
			g.str(e.action)
			g.str("addr")
			g.int(int64(e.addr))
			g.str("size")
			g.int(e.size)
			g.str("stream")
			g.int(0)
			g.str("time_us")
			g.int(t)
			g.str("frames")
			g.op(']')
			g.put()
			g.op('(')
			for _, f := range stacks[e.stack] {
				if m := frameMemo[f]; m >= 0 {
					g.get(uint32(m))
					continue
				}
				g.op('}')
				frameMemo[f] = int64(g.put())
				g.op('(')
				g.str("name")
				g.str("fn_" + strconv.Itoa(f))
				g.str("filename")
				g.str("model_" + strconv.Itoa(f%17) + ".py")
				g.str("line")
				g.int(int64(f))
				g.op('u')
			}
			g.op('e')
			g.op('u')
		})
		if n > 0 {
			g.op('e')
		}
	}
	g.op('e')
	g.str("allocator_settings")
	g.op('}')
	g.put()
	g.op('(')
	g.str("PYTORCH_CUDA_ALLOC_CONF")
	g.str("")
	g.str("max_split_size")
	g.int(-1)
	g.op('u')
	g.op('u')
	g.op('.')
	g.flush()
	return g.n, g.w.Flush()
}

// gen writes a pickle in frames of 64 KiB, as Python's pickler does.
type gen struct {
	w     *bufio.Writer
	buf   []byte
	memo  map[string]uint32
	next  uint32
	n     int64
	start bool
}

// raw writes an opcode's argument, or an opcode that may not end a frame.
func (g *gen) raw(b ...byte) { g.buf = append(g.buf, b...) }

// op starts an opcode: a frame ends only between two.
func (g *gen) op(b byte) {
	if len(g.buf) >= 64<<10 {
		g.flush()
	}
	g.buf = append(g.buf, b)
}

func (g *gen) flush() {
	if !g.start {
		// PROTO stands outside the frames.
		g.w.Write(g.buf[:2])
		g.n += 2
		g.buf = g.buf[2:]
		g.start = true
	}
	if len(g.buf) == 0 {
		return
	}
	var h [9]byte
	h[0] = 0x95
	binary.LittleEndian.PutUint64(h[1:], uint64(len(g.buf)))
	g.w.Write(h[:])
	g.w.Write(g.buf)
	g.n += int64(9 + len(g.buf))
	g.buf = g.buf[:0]
}

func (g *gen) put() uint32 {
	g.raw(0x94)
	g.next++
	return g.next - 1
}

func (g *gen) get(i uint32) {
	if i < 256 {
		g.raw('h', byte(i))
	} else {
		g.raw('j')
		g.buf = binary.LittleEndian.AppendUint32(g.buf, i)
	}
}

func (g *gen) str(s string) {
	if i, ok := g.memo[s]; ok {
		g.get(i)
		return
	}
	g.raw(0x8c, byte(len(s)))
	g.raw([]byte(s)...)
	g.memo[s] = g.put()
}

func (g *gen) int(x int64) {
	switch {
	case x >= 0 && x < 256:
		g.raw('K', byte(x))
	case x >= 0 && x < 65536:
		g.raw('M', byte(x), byte(x>>8))
	case x >= -1<<31 && x < 1<<31:
		g.raw('J')
		g.buf = binary.LittleEndian.AppendUint32(g.buf, uint32(x))
	default:
		g.raw(0x8a, 8)
		g.buf = binary.LittleEndian.AppendUint64(g.buf, uint64(x))
	}
}

// slotHeap is a min-heap of slot numbers.
type slotHeap []int

func (h slotHeap) Len() int           { return len(h) }
func (h slotHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h slotHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *slotHeap) Push(x any)        { *h = append(*h, x.(int)) }
func (h *slotHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
