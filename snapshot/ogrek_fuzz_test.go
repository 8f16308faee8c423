package snapshot_test

import (
	"bytes"
	"encoding/binary"
	"hash/fnv"
	"math"
	"math/big"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc/snapshot"
)

// FuzzReadOgrek is a differential test: it writes a random pickle of a
// snapshot's shape from the fuzzer's bytes (genPickle), with the opcodes,
// memo references and fields of every type that a pickler may write,
// junk under keys the package does not read, and now and then a field
// that a replay needs of a wrong type; then reads it with Read, plainly,
// compactly, and spilling every page to the temporary file, and with
// og-rek's decoder, whose tree the test converts by the package's rules
// (readOgrek). The reads must agree: both refuse the file, or both give
// the same snapshot, stacks compared frame by frame.
func FuzzReadOgrek(f *testing.F) {
	for _, seed := range []string{"", "\x00", "\x01\x02\x03", "snapshot", "\xff\xfe\xfd\xfc\xfb\xfa", "memo\x07\x07\x07", "\x05spill"} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, seed []byte) {
		data := genPickle(seed)
		sameAsOracle(t, data)
	})
}

// TestReadOgrekGenerated runs FuzzReadOgrek's check on a hundred
// generated pickles, as a plain test does.
func TestReadOgrekGenerated(t *testing.T) {
	n := 100
	if testing.Short() {
		n = 20
	}
	for i := range n {
		seed := binary.LittleEndian.AppendUint32(nil, uint32(i))
		sameAsOracle(t, genPickle(seed))
	}
}

func sameAsOracle(t *testing.T, data []byte) {
	t.Helper()
	s, err := snapshot.Read(bytes.NewReader(data), "g.pickle")
	old, oerr := snapshot.ReadOgrek(bytes.NewReader(data), "g.pickle")
	require.Equal(t, oerr == nil, err == nil, "Read: %v\nog-rek: %v\npickle: %q", err, oerr, data)
	if err != nil {
		return
	}
	require.Equal(t, withoutStacks(old), withoutStacks(s), "pickle: %q", data)
	require.Equal(t, stacksOf(old), stacksOf(s), "pickle: %q", data)
	// Again, with every page past the first written out and read back
	// one at a time.
	for _, spill := range []bool{false, true} {
		var o snapshot.ReadOptions
		if spill {
			o = snapshot.SpillAfter(o, 0, 1)
		}
		cs, err := snapshot.ReadWith(bytes.NewReader(data), "g.pickle", o)
		require.NoError(t, err)
		require.Equal(t, withoutStacks(old), withoutStacks(cs), "spill %v, pickle: %q", spill, data)
		require.Equal(t, stacksOf(old), stacksOf(cs), "spill %v", spill)
	}
}

// A chooser draws the choices of genPickle from the fuzzer's bytes, then
// from a generator seeded with them.
type chooser struct {
	b []byte
	r *rand.Rand
}

func newChooser(seed []byte) *chooser {
	h := fnv.New64a()
	h.Write(seed)
	return &chooser{b: seed, r: rand.New(rand.NewPCG(h.Sum64(), uint64(len(seed))))}
}

// n returns a choice in [0, k).
func (c *chooser) n(k int) int {
	if k <= 1 {
		return 0
	}
	if len(c.b) > 0 {
		x := int(c.b[0])
		c.b = c.b[1:]
		return x % k
	}
	return c.r.IntN(k)
}

// one reports a chance of 1 in k.
func (c *chooser) one(k int) bool { return c.n(k) == 0 }

// A pnode is a value that genPickle writes: a dict (items are keys and
// values in turn), list or tuple, or a scalar; a node written twice is
// the same object, a memo reference where it was memoized.
type pnode struct {
	kind  byte // 'd', 'l', 't', 's' (str), 'b' (bytes), 'i', 'f', '?' (bool), 'N'
	items []*pnode
	str   string
	num   *big.Int
	f     float64
	flag  bool
	slot  int // its memo slot, -1
	busy  bool
}

func pstr(s string) *pnode         { return &pnode{kind: 's', str: s, slot: -1} }
func pint(n int64) *pnode          { return &pnode{kind: 'i', num: big.NewInt(n), slot: -1} }
func pbig(n *big.Int) *pnode       { return &pnode{kind: 'i', num: n, slot: -1} }
func plist(items ...*pnode) *pnode { return &pnode{kind: 'l', items: items, slot: -1} }
func pdict(kv ...*pnode) *pnode    { return &pnode{kind: 'd', items: kv, slot: -1} }

// set appends key k with value v to dict d.
func (d *pnode) set(k string, v *pnode) { d.items = append(d.items, pstr(k), v) }

// genPickle returns a random pickle of a snapshot's shape drawn by the
// bytes seed.
func genPickle(seed []byte) []byte {
	c := newChooser(seed)
	g := &pgen{c: c, strs: map[string]*pnode{}}
	top := g.snapshot()
	w := &pwriter{c: c, proto: 2 + c.n(4), next: 0, ints: g.ints}
	w.b = append(w.b, 0x80, byte(w.proto))
	if c.one(6) {
		w.padMemo(40_000 + c.n(40_000)) // two pages of memo and more, for the spill
	}
	w.value(top)
	w.b = append(w.b, '.')
	return w.b
}

type pgen struct {
	c      *chooser
	strs   map[string]*pnode // strings written once, referred to after
	frames []*pnode          // frame dicts, shared
	ints   []*pnode          // integers, shared, that the writer memoizes in slots it stores over
}

// size returns an integer for a size, now and then one of g.ints.
func (g *pgen) size(n int64) *pnode {
	if g.c.one(3) {
		if len(g.ints) < 4 {
			g.ints = append(g.ints, pint(int64(g.c.n(1<<16))))
		}
		return g.ints[g.c.n(len(g.ints))]
	}
	return pint(n)
}

// s returns the string node of s, shared as Python's pickler shares it.
func (g *pgen) s(s string) *pnode {
	if n, ok := g.strs[s]; ok && !g.c.one(8) {
		return n
	}
	n := pstr(s)
	g.strs[s] = n
	return n
}

// junk returns a value of any type, nested to depth.
func (g *pgen) junk(depth int) *pnode {
	c := g.c
	switch c.n(12) {
	case 0:
		return &pnode{kind: 'N', slot: -1}
	case 1:
		return &pnode{kind: '?', flag: c.one(2), slot: -1}
	case 2:
		return &pnode{kind: 'f', f: float64(c.n(1000)) / 7, slot: -1}
	case 3:
		return g.s([]string{"", "N/A", "x", "ünï", "junk"}[c.n(5)])
	case 4:
		return &pnode{kind: 'b', str: "by\x00tes"[:c.n(7)], slot: -1}
	case 5:
		return g.int()
	case 6, 7:
		if depth > 0 {
			l := plist()
			for range c.n(4) {
				l.items = append(l.items, g.junk(depth-1))
			}
			return l
		}
	case 8, 9:
		if depth > 0 {
			d := pdict()
			for range c.n(4) {
				d.items = append(d.items, g.s([]string{"a", "frames", "size", "action", "blocks", "k"}[c.n(6)]), g.junk(depth-1))
			}
			return d
		}
	case 10:
		if depth > 0 {
			t := &pnode{kind: 't', slot: -1}
			for range c.n(4) {
				t.items = append(t.items, g.junk(depth-1))
			}
			return t
		}
	}
	return g.int()
}

// int returns an integer of any width.
func (g *pgen) int() *pnode {
	c := g.c
	switch c.n(8) {
	case 0:
		return pint(int64(c.n(256)))
	case 1:
		return pint(int64(c.n(65536)))
	case 2:
		return pint(-int64(c.n(1 << 20)))
	case 3:
		return pbig(new(big.Int).SetUint64(math.MaxUint64))
	case 4:
		return pbig(new(big.Int).Lsh(big.NewInt(1), uint(63+c.n(80))))
	case 5:
		return pbig(new(big.Int).Neg(new(big.Int).Lsh(big.NewInt(1), uint(60+c.n(80)))))
	}
	return pint(int64(c.r.Uint64() >> 17))
}

// field returns v, or now and then a value of a wrong type in its place.
func (g *pgen) field(v *pnode) *pnode {
	if g.c.one(150) {
		return g.junk(1)
	}
	return v
}

// addJunk adds keys that the package does not read to d.
func (g *pgen) addJunk(d *pnode) {
	for g.c.one(3) {
		d.set([]string{"compile_context", "user_metadata", "memory_tag", "lifetime", "x"}[g.c.n(5)], g.junk(3))
	}
}

func (g *pgen) frame() *pnode {
	c := g.c
	if len(g.frames) > 0 && !c.one(4) {
		return g.frames[c.n(len(g.frames))]
	}
	f := pdict()
	switch c.n(6) {
	case 0:
		f.set("name", g.s("empty_cache"))
		f.set("filename", g.s("torch/cuda/memory.py"))
	case 1:
		f.set("name", g.s("c10::cuda::CUDACachingAllocator::emptyCache(c10::cuda::MempoolId_t)"))
		f.set("filename", g.s(""))
	default:
		f.set("name", g.s([]string{"forward", "f", "backward"}[c.n(3)]))
		f.set("filename", g.s([]string{"x.py", "model.py"}[c.n(2)]))
	}
	var line *pnode
	switch c.n(5) {
	case 0:
		line = g.junk(2)
	case 1:
		line = pbig(new(big.Int).SetUint64(math.MaxUint64))
	default:
		line = pint(int64(c.n(500)))
	}
	f.set("line", line)
	g.addJunk(f)
	g.frames = append(g.frames, f)
	return f
}

func (g *pgen) stack() *pnode {
	if g.c.one(10) {
		return &pnode{kind: 'N', slot: -1}
	}
	l := plist()
	for range g.c.n(6) {
		l.items = append(l.items, g.frame())
	}
	return l
}

func (g *pgen) addr() *pnode {
	switch {
	case g.c.one(80):
		return g.int()
	case g.c.one(10):
		return pbig(new(big.Int).SetUint64(1<<63 + uint64(g.c.n(1<<20))))
	}
	return pint(0x7f0000000000 + int64(g.c.n(1<<16))<<9)
}

func (g *pgen) segment() *pnode {
	c := g.c
	seg := pdict()
	seg.set("device", g.field(pint(int64(c.n(3)))))
	if !c.one(30) {
		seg.set("address", g.field(g.addr()))
	}
	var blocks []*pnode
	total := int64(0)
	for range 1 + c.n(4) {
		b := pdict()
		size := int64(512 * (1 + c.n(4096)))
		total += size
		if !c.one(3) {
			b.set("address", g.field(g.addr()))
		}
		b.set("size", g.field(pint(size)))
		b.set("requested_size", g.field(pint(size-int64(c.n(512)))))
		b.set("state", g.field(g.s([]string{"active_allocated", "inactive", "active_pending_free"}[c.n(3)])))
		if c.one(4) {
			b.set("category", g.s("parameter"))
		}
		b.set("frames", g.stack())
		g.addJunk(b)
		blocks = append(blocks, b)
	}
	seg.set("total_size", g.field(pint(total)))
	seg.set("allocated_size", g.field(pint(total/2)))
	seg.set("active_size", g.field(pint(total/2)))
	seg.set("requested_size", g.field(pint(total/3)))
	seg.set("stream", g.field(pint(int64(c.n(3)))))
	seg.set("segment_type", g.field(g.s([]string{"small", "large"}[c.n(2)])))
	seg.set("segment_pool_id", g.field(&pnode{kind: 't', items: []*pnode{pint(int64(c.n(2))), pint(int64(c.n(3)))}, slot: -1}))
	switch c.n(3) {
	case 0:
		seg.set("is_expandable", g.field(&pnode{kind: '?', flag: c.one(2), slot: -1}))
	case 1:
		seg.set("is_expandable", pint(int64(c.n(2))))
	}
	seg.set("frames", g.stack())
	seg.set("blocks", g.field(plist(blocks...)))
	g.addJunk(seg)
	g.shuffle(seg)
	return seg
}

var actions = []string{"alloc", "free_requested", "free_completed", "segment_alloc", "segment_free",
	"segment_map", "segment_unmap", "snapshot", "oom"}

func (g *pgen) entry() *pnode {
	c := g.c
	e := pdict()
	action := actions[c.n(len(actions))]
	e.set("action", g.field(g.s(action)))
	if action == "oom" && c.one(2) {
		e.set("device_free", g.field(pint(int64(c.n(1<<30)))))
	} else if !c.one(40) {
		e.set("addr", g.field(g.addr()))
	}
	if action != "oom" || !c.one(30) {
		e.set("size", g.field(g.size(int64(c.n(1<<24)))))
	}
	e.set("stream", g.field(pint(int64(c.n(3)))))
	if !c.one(4) {
		e.set("time_us", g.field(pint(int64(c.n(1<<40)))))
	}
	if c.one(8) {
		e.set("category", g.field(g.s("activation")))
	}
	g.addJunk(e)
	e.set("frames", g.stack())
	g.shuffle(e)
	return e
}

// shuffle swaps a few of a dict's items, for keys in another order.
func (g *pgen) shuffle(d *pnode) {
	n := len(d.items) / 2
	for range g.c.n(3) {
		i, j := g.c.n(n), g.c.n(n)
		d.items[2*i], d.items[2*j] = d.items[2*j], d.items[2*i]
		d.items[2*i+1], d.items[2*j+1] = d.items[2*j+1], d.items[2*i+1]
	}
}

func (g *pgen) snapshot() *pnode {
	c := g.c
	var segs []*pnode
	for range c.n(4) {
		segs = append(segs, g.segment())
	}
	if c.one(10) {
		return plist(segs...) // a legacy snapshot
	}
	top := pdict()
	top.set("segments", g.field(plist(segs...)))
	if !c.one(10) {
		traces := plist()
		for range c.n(3) {
			tr := plist()
			for range c.n(8) {
				// Now and then, the same entry twice.
				if len(tr.items) > 0 && c.one(20) {
					tr.items = append(tr.items, tr.items[c.n(len(tr.items))])
					continue
				}
				tr.items = append(tr.items, g.field(g.entry()))
			}
			traces.items = append(traces.items, tr)
		}
		top.set("device_traces", traces)
	}
	if c.one(2) {
		settings := pdict()
		settings.set("PYTORCH_CUDA_ALLOC_CONF", g.s(""))
		settings.set("expandable_segments", &pnode{kind: '?', flag: c.one(2), slot: -1})
		if c.one(4) {
			settings.set("max_split_size", pint(int64(c.n(1<<20))<<20))
		}
		top.set("allocator_settings", settings)
	}
	for c.one(3) {
		top.set([]string{"external_annotations", "physical_mappings", "junk"}[c.n(3)], g.junk(4))
	}
	g.shuffle(top)
	return top
}

// A pwriter writes the pickle of pnodes, each opcode drawn among those
// that a pickler may write for it, that og-rek reads too (no LONG4,
// BINUNICODE8, BINBYTES8 nor sets).
type pwriter struct {
	c     *chooser
	b     []byte
	proto int
	next  int      // the next memo slot that MEMOIZE takes
	ints  []*pnode // integers to store over a slot with
	// bare is set for a value written right above the open list that
	// APPEND puts it in: there, a MARK would be read as the MARK of the
	// list's batch (the decoder tells a container's place from the
	// stack, as picklers of protocols 2 to 5 write it), so the value is
	// not one built from a MARK (LIST, DICT, TUPLE).
	bare bool
}

// padMemo memoizes n empty lists under a key that is read no further:
// the snapshot's own memo entries then go to pages past the first.
func (w *pwriter) padMemo(n int) {
	w.b = append(w.b, "}q\x00(X\x04\x00\x00\x00junk]("...) // slot 0: a dict, popped below
	w.next = 1
	for range n {
		w.b = append(w.b, ']')
		w.memoize()
	}
	w.b = append(w.b, "eu0"...)
}

// memoize stores the top of the stack in the next memo slot.
func (w *pwriter) memoize() int {
	i := w.next
	w.next++
	switch {
	case w.proto >= 4 && !w.c.one(4):
		w.b = append(w.b, 0x94) // MEMOIZE
	case i < 256 && !w.c.one(3):
		w.b = append(w.b, 'q', byte(i))
	default:
		w.b = append(w.b, 'r')
		w.b = binary.LittleEndian.AppendUint32(w.b, uint32(i))
	}
	return i
}

func (w *pwriter) get(i int) {
	if i < 256 && !w.c.one(3) {
		w.b = append(w.b, 'h', byte(i))
		return
	}
	w.b = append(w.b, 'j')
	w.b = binary.LittleEndian.AppendUint32(w.b, uint32(i))
}

// storeOver now and then stores an integer in the memo slot of n, a
// dict whose container is still to be used, as a pickler that reuses
// slots would: Python reads the integer there from then on, where the
// integer's node is written again. The dict's later references are
// written out again.
func (w *pwriter) storeOver(n *pnode) {
	if n.slot < 0 || !w.c.one(4) {
		return
	}
	var x *pnode
	for _, i := range w.ints {
		if i.slot < 0 {
			x = i
			break
		}
	}
	if x == nil {
		x = pint(int64(w.c.n(256)))
	}
	w.int(x.num)
	x.slot = n.slot
	if n.slot < 256 {
		w.b = append(w.b, 'q', byte(n.slot))
	} else {
		w.b = append(w.b, 'r')
		w.b = binary.LittleEndian.AppendUint32(w.b, uint32(n.slot))
	}
	w.b = append(w.b, '0') // POP
	n.slot = -1
}

func (w *pwriter) value(n *pnode) {
	c := w.c
	bare := w.bare
	w.bare = false
	// Dicts, strings, tuples and scalars are referred to again where
	// memoized; lists never are, as og-rek's memo keeps a list as it was
	// when memoized.
	if n.slot >= 0 && n.kind != 'l' && !n.busy {
		w.get(n.slot)
		return
	}
	switch n.kind {
	case 'N':
		w.b = append(w.b, 'N')
	case '?':
		if n.flag {
			w.b = append(w.b, 0x88)
		} else {
			w.b = append(w.b, 0x89)
		}
	case 'f':
		w.b = append(w.b, 'G')
		w.b = binary.BigEndian.AppendUint64(w.b, math.Float64bits(n.f))
	case 'i':
		w.int(n.num)
	case 's', 'b':
		op := byte('X')
		switch {
		case n.kind == 'b' && len(n.str) < 256 && !c.one(3):
			op = 'C'
		case n.kind == 'b':
			op = 'B'
		case w.proto >= 4 && len(n.str) < 256 && !c.one(3):
			op = 0x8c
		}
		w.b = append(w.b, op)
		if op == 'C' || op == 0x8c {
			w.b = append(w.b, byte(len(n.str)))
		} else {
			w.b = binary.LittleEndian.AppendUint32(w.b, uint32(len(n.str)))
		}
		w.b = append(w.b, n.str...)
		if !c.one(5) {
			n.slot = w.memoize()
		}
	case 't':
		switch {
		case len(n.items) == 0:
			w.b = append(w.b, ')')
		case len(n.items) <= 3 && (bare || !c.one(3)):
			for _, it := range n.items {
				w.value(it)
			}
			w.b = append(w.b, 0x84+byte(len(n.items)))
		default:
			w.b = append(w.b, '(')
			for _, it := range n.items {
				w.value(it)
			}
			w.b = append(w.b, 't')
		}
		if !c.one(4) {
			n.slot = w.memoize()
		}
	case 'l', 'd':
		if !bare && c.one(8) {
			// MARK, the items, LIST or DICT: the container is made last.
			w.b = append(w.b, '(')
			for _, it := range n.items {
				w.value(it)
			}
			w.b = append(w.b, map[byte]byte{'l': 'l', 'd': 'd'}[n.kind])
			if !c.one(4) {
				n.slot = w.memoize()
			}
			return
		}
		if n.kind == 'l' {
			w.b = append(w.b, ']')
		} else {
			w.b = append(w.b, '}')
		}
		if !c.one(6) {
			n.slot = w.memoize()
		}
		n.busy = true
		step := 1
		if n.kind == 'd' {
			step = 2
		}
		for i := 0; i < len(n.items); {
			// A batch of items, or one alone (APPEND, SETITEM).
			k := step
			if !c.one(3) {
				k = step * (1 + c.n(len(n.items)/step+1))
			}
			k = min(k, len(n.items)-i)
			if k == step && !c.one(3) {
				for _, it := range n.items[i : i+k] {
					w.bare = n.kind == 'l'
					w.value(it)
				}
				w.b = append(w.b, map[byte]byte{'l': 'a', 'd': 's'}[n.kind])
			} else {
				w.b = append(w.b, '(')
				for _, it := range n.items[i : i+k] {
					w.value(it)
					if it.kind == 'd' {
						w.storeOver(it)
					}
				}
				w.b = append(w.b, map[byte]byte{'l': 'e', 'd': 'u'}[n.kind])
			}
			i += k
		}
		n.busy = false
	}
}

// int writes n as BININT1, BININT2, BININT or LONG1, as a pickler may.
func (w *pwriter) int(n *big.Int) {
	if n.IsInt64() && !w.c.one(6) {
		switch x := n.Int64(); {
		case x >= 0 && x < 256:
			w.b = append(w.b, 'K', byte(x))
			return
		case x >= 0 && x < 65536:
			w.b = append(w.b, 'M', byte(x), byte(x>>8))
			return
		case x >= math.MinInt32 && x <= math.MaxInt32:
			w.b = append(w.b, 'J')
			w.b = binary.LittleEndian.AppendUint32(w.b, uint32(int32(x)))
			return
		}
	}
	// LONG1: two's complement, little-endian, in the fewest bytes.
	nb := n.BitLen()/8 + 1
	v := new(big.Int).Set(n)
	if n.Sign() < 0 {
		v.Add(v, new(big.Int).Lsh(big.NewInt(1), uint(8*nb)))
	}
	be := v.FillBytes(make([]byte, nb))
	w.b = append(w.b, 0x8a, byte(nb))
	for i := nb - 1; i >= 0; i-- {
		w.b = append(w.b, be[i])
	}
}
