package snapshot

import (
	"encoding/binary"

	spillfile "github.com/gpualloc/gpualloc/internal/spill"
	"github.com/gpualloc/gpualloc/snapshot/internal/pages"
)

// The bounds of a read that its ReadOptions leave at zero.
const (
	defaultMaxHeld = 256 << 20
	defaultLoaded  = 8
)

// A read's spill bounds its memory, whatever the length of the file:
// once the pages of its long lists (the trace entries' records and the
// memo, each a pages.List) take [ReadOptions.MaxHeld] bytes, each page
// filled after that is written to an unnamed temporary file (a
// [spillfile.File] in [ReadOptions.TempDir]) and dropped, and read back,
// a page at a time, when it is needed again (see pages.Spill). The walks
// after a read are sequential (the start-state rebuild walks back, the
// replays forward), so each page past the bound is read once per walk.
//
// The file takes 48 bytes a trace entry (recCodec) and 9 a memo entry
// (its 8 and its tag's byte). It is closed when the read ends, unless it
// holds a read's traces: then when the snapshot that reads it is no
// longer referenced.
//
// The first failure to make, write or read the file back during the read
// ends the read with that error (a *pages.Error in the decoder's Err).
// After the read, a trace that cannot read a page back reports it by
// [Trace.Err].
//
// newSpill returns the spill of a read with o, whose first failure is
// stored in *fail.
func newSpill(o ReadOptions, fail *error) *pages.Spill {
	after := o.MaxHeld
	if after <= 0 {
		after = defaultMaxHeld
	}
	return pages.NewSpill(spillfile.New(o.TempDir, "gpualloc-snapshot-"), after, orDefault(o.maxLoaded, defaultLoaded), fail)
}

// recBytes is the bytes that an entryRec takes in the file.
const recBytes = 48

// recCodec writes the entryRecs of a trace's page to the file field by
// field, and reads them back.
var recCodec = &pages.Codec[entryRec]{
	Bytes: recBytes,
	Encode: func(buf []byte, pg []entryRec) {
		for i := range pg {
			r, b := &pg[i], buf[recBytes*i:recBytes*(i+1)]
			binary.LittleEndian.PutUint64(b[0:], r.addr)
			binary.LittleEndian.PutUint64(b[8:], r.stream)
			binary.LittleEndian.PutUint64(b[16:], uint64(r.size))
			binary.LittleEndian.PutUint64(b[24:], uint64(r.time))
			binary.LittleEndian.PutUint32(b[32:], r.action)
			binary.LittleEndian.PutUint32(b[36:], r.category)
			binary.LittleEndian.PutUint32(b[40:], uint32(r.stack))
			b[44] = 0
			if r.emptyCache {
				b[44] = 1
			}
		}
	},
	Decode: func(pg []entryRec, buf []byte) {
		for i := range pg {
			r, b := &pg[i], buf[recBytes*i:recBytes*(i+1)]
			*r = entryRec{
				addr: binary.LittleEndian.Uint64(b[0:]), stream: binary.LittleEndian.Uint64(b[8:]),
				size: int64(binary.LittleEndian.Uint64(b[16:])), time: int64(binary.LittleEndian.Uint64(b[24:])),
				action: binary.LittleEndian.Uint32(b[32:]), category: binary.LittleEndian.Uint32(b[36:]),
				stack: StackID(binary.LittleEndian.Uint32(b[40:])), emptyCache: b[44] != 0,
			}
		}
	},
}
