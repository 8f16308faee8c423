package snapshot

import (
	"bytes"
	"encoding/binary"
	"slices"

	"github.com/gpualloc/gpualloc/snapshot/internal/pages"
	"github.com/gpualloc/gpualloc/snapshot/internal/pickle"
)

// The decoder's fast paths: the opcodes that make up most of a big
// snapshot run in loops of their own, over the bytes already in the input
// buffer, rather than one by one through Machine.Step. Each stops where
// its opcodes end or the buffer does, and leaves the rest to Machine.Step.

// memoRun runs the opcodes that start with op and only push a value
// (pickle.Pushes) through the machine's fast path (Machine.PushRun), as
// long as their arguments are in the buffer: in a snapshot, its entries'
// dicts are memo references to their keys and small integers. It reports
// false, having consumed nothing, when op is left for Machine.Step.
//
// Right after a MARK that batches items for an open "frames" list, the
// frames referenced are not pushed but absorbed (see absorb): the hook
// that PushRun's doc leaves to the layer above.
func (d *decoder) memoRun(op byte) bool {
	if op == pickle.OpBinGet || op == pickle.OpLongBinGet {
		if k := len(d.Marks); k > 0 {
			if m := d.Marks[k-1]; m.Pos == len(d.Stack)-1 && m.Owner >= 0 {
				if c := &d.conts[m.Owner]; c.role == rStack && c.typ == ctList && c.done.K == kMark {
					return d.absorb(op)
				}
			}
		}
	}
	if len(d.absorbed) > 0 {
		return false // run puts the absorbed frames back first
	}
	return d.PushRun(op)
}

// The tags of the decoder's memo entries (pickle.Memo.Tags), which absorb
// reads.
const (
	isFrame = 1 // the memo entry is a kFrame
	isEC    = 2 // on the empty-cache path
)

// memoTag returns the tag of v in the memo.
func memoTag(v val) byte {
	switch {
	case v.K != kFrame:
		return 0
	case v.X&frameEC != 0:
		return isFrame | isEC
	}
	return isFrame
}

// absorb is memoRun for the references that follow a MARK batching items
// for the open "frames" list c: the frames referenced are not pushed but
// noted by their memo indexes in d.absorbed, for the APPENDS that closes
// the batch (commitAbsorbed); any other opcode first puts them back on the
// stack (unabsorb), so that what the pickle does with them is done as
// written. It stops, with what it has absorbed, at a reference to anything
// but a frame. Whether an entry is a frame is told from its tag in the
// memo (memoTag), a byte per entry, so that the hundreds of frame dicts that a snapshot
// refers to millions of times stay within the processor's first cache. In
// a big file, a run that starts a batch is first looked up among those
// read before (see frameRun).
func (d *decoder) absorb(op byte) bool {
	in := &d.In
	buf, kinds, n := in.Buf[:in.End], d.Memo.Tags(), uint64(d.Memo.Len())
	at := in.Pos - 1 // the opcode's offset
	slot, tag := -1, uint32(0)
	if len(d.absorbed) == 0 && d.runs != nil && at+runKey <= len(buf) {
		if g := d.Memo.Gen(); g != d.runGen {
			clear(d.runTags) // a frame was stored over: the runs may name something else
			d.runGen = g
		}
		var set int
		set, tag = runHash(buf[at:])
		for j, t := range d.runTags[set*runWays : set*runWays+runWays] {
			if t != tag {
				continue // the tags of a set fill 16 bytes: most of it is turned away there
			}
			s := set*runWays + j
			b := d.runBytes[s]
			if n := len(b); at+n <= len(buf) && bytes.Equal(buf[at:at+n], b) {
				r := &d.runs[s]
				// The run's indexes stand as they are until the batch
				// ends (nothing replaces a run while one is absorbed),
				// its length as capacity, so that an append copies them.
				d.absOwn, d.absorbed, d.absRun = d.absorbed, r.idx[:len(r.idx):len(r.idx)], true
				if len(r.ids) > 0 { // none without the stacks
					d.absIDs = append(d.absIDs, r.ids...)
				}
				d.absEC = r.ec
				in.Pos = at + len(b)
				return true
			}
		}
		// Read below, the run takes the place of one of the set's.
		slot = set*runWays + int(d.runNext%runWays)
		d.runNext++
	}
	if d.absRun {
		// More after a run: the run's indexes into the decoder's own.
		d.absorbed, d.absRun = append(d.absOwn, d.absorbed...), false
	}
	pos, done, abs, ec := in.Pos, in.Pos, d.absorbed, byte(0)
	start := len(abs)
	for {
		var i uint64
		if op == pickle.OpLongBinGet {
			if pos+4 > len(buf) {
				break
			}
			i = uint64(binary.LittleEndian.Uint32(buf[pos:]))
			pos += 4
		} else {
			if pos >= len(buf) {
				break
			}
			i = uint64(buf[pos])
			pos++
		}
		if i >= n {
			break
		}
		pg, j := kinds[i>>pages.Shift], i&(pages.Size-1)
		if j >= uint64(len(pg)) {
			break // spilled: get loads it
		}
		k := pg[j]
		if k&isFrame == 0 {
			break
		}
		abs = append(abs, uint32(i))
		ec |= k
		done = pos
		if pos >= len(buf) {
			break
		}
		if op = buf[pos]; op != pickle.OpBinGet && op != pickle.OpLongBinGet {
			break
		}
		pos++
	}
	// The next opcode starts at in.Pos, for run's loop to read.
	in.Pos = done
	d.absorbed = abs
	d.absEC = d.absEC || ec&isEC != 0
	if slot >= 0 && done-at >= runKey && done-at <= maxRun {
		d.runTags[slot] = tag
		d.runBytes[slot] = append(d.runBytes[slot][:0], buf[at:done]...)
		r := &d.runs[slot]
		r.idx = append(r.idx[:0], abs...)
		r.ec = d.absEC
		r.ids = r.ids[:0]
		if !d.noStacks {
			r.ids = d.frameIDs(r.ids, abs)
			d.absIDs = append(d.absIDs, r.ids...)
		}
	} else if d.runs == nil && d.Memo.Len() >= d.runsFrom {
		const slots = runWays << runBits
		d.runs, d.runTags, d.runBytes = make([]frameRun, slots), make([]uint32, slots), make([][]byte, slots)
		d.runGen = d.Memo.Gen()
	}
	return len(abs) > start
}

// A frameRun is a run of memo references to frames that absorb read at
// the start of a batch: the memo indexes that they refer to. A snapshot's
// stacks repeat: a run is kept in a slot, with its bytes in the input
// (the opcodes and their arguments), and a run that starts with the same
// bytes is looked up by them (runHash: a set of runWays slots, replaced
// in turn, and a tag for each slot) and, when all its bytes are the same,
// absorbed at once, for the cost of comparing and copying its bytes
// rather than reading reference by reference. The slots are arrays of
// the decoder, so that a look-up reads a set's tags from 16 bytes and a
// slot's bytes through a slice of a small array, and the rest only for
// the run it takes. The memo entries referred to are still frames unless
// one of them was stored over (pickle.Memo.Gen), which empties the slots.
// The runs kept take at most runWays<<runBits times 5*maxRun bytes (40
// MiB), whatever the file.
type frameRun struct {
	idx []uint32
	ids []byte // the frames' indexes in Snapshot.Frames, as stackVal takes them; none without the stacks
	ec  bool
}

const (
	runKey  = 16   // the bytes of a run that runHash reads
	runBits = 11   // decoder.runs holds 1<<runBits sets of runs
	runWays = 4    // the runs of a set, which share their runHash
	maxRun  = 1024 // the longest run kept, in bytes: about 200 frames
)

// defaultRunsFrom is the number of memo entries from which a file is big
// enough for decoder.runs.
const defaultRunsFrom = 1 << 16

// runHash returns the set of slots of a run that starts with the
// runKey bytes b, and its tag: never 0, the tag of an empty slot.
func runHash(b []byte) (set int, tag uint32) {
	h := binary.LittleEndian.Uint64(b)*0x9e3779b97f4a7c15 ^ binary.LittleEndian.Uint64(b[8:runKey])*0xc2b2ae3d27d4eb4f
	return int(h >> (64 - runBits)), uint32(h>>21) | 1 // bits apart from the set's
}

// commitAbsorbed adds the frames that absorb took to their list c, at the
// APPENDS that closes their batch.
func (d *decoder) commitAbsorbed(c *cont) {
	if len(d.absorbed) == 0 {
		return
	}
	c.count += int32(len(d.absorbed))
	c.ec = c.ec || d.absEC
	if !d.noStacks {
		// Room for minFrames more at least: one allocation, not several.
		c.ids = slices.Grow(c.ids, 4*max(len(d.absorbed), minFrames))
		c.ids = append(c.ids, d.absIDs...)
		c.ids = d.frameIDs(c.ids, d.absorbed[len(d.absIDs)/4:])
	}
	d.endAbsorbed()
}

// endAbsorbed empties the frames absorbed, taking back the decoder's own
// slice where they were a run's.
func (d *decoder) endAbsorbed() {
	if d.absRun {
		d.absorbed, d.absRun = d.absOwn, false
	}
	d.absorbed, d.absIDs, d.absEC = d.absorbed[:0], d.absIDs[:0], false
}

// frameIDs appends to ids the frame indexes of the memo entries idx, 4
// bytes each.
func (d *decoder) frameIDs(ids []byte, idx []uint32) []byte {
	for _, i := range idx {
		ids = binary.LittleEndian.AppendUint32(ids, uint32(d.Memo.At(uint64(i)).X))
	}
	return ids
}

// minFrames is the least room for frames that commitAbsorbed makes in a
// list: PyTorch records tens of frames per stack.
const minFrames = 64

// unabsorb puts the frames that absorb took back on the stack, above their
// MARK.
func (d *decoder) unabsorb() {
	for _, i := range d.absorbed {
		d.Stack = append(d.Stack, d.Memo.At(uint64(i)))
	}
	d.endAbsorbed()
}
