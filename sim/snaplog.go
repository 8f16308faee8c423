package sim

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/internal/spill"
)

// An entryLog holds a device's trace entries, all of them, in compact
// binary form: blocks of logBlock bytes, each entry a byte of action and
// category then varints of its address, size, stream, the difference of
// its time from the entry before and, when the trace has stacks, its
// stack (about 13 bytes for an entry of a replay, 14 with stacks, against
// 40 as a snapEntry). With a spill file the full blocks go to it
// and only their offsets stay in memory, so that the memory of a recording
// is one block per device whatever the length of the trace; without one
// they stay in memory. Adding an entry allocates nothing but, once per
// block, the block (in memory) or the growth of the offsets.
type entryLog struct {
	spill  *spillFile
	buf    []byte    // the block being filled
	blocks [][]byte  // the full blocks, without a spill file
	at     []spilled // where the full blocks lie in the spill file
	n      int       // entries
	last   int64     // the time of the last entry
	stacks bool      // each entry ends with its stack: the trace has stacks
}

// A spilled block lies at offset at of the spill file, size bytes long.
type spilled struct {
	at   int64
	size int
}

// logBlock is the size of a block of entries (a variable for the tests,
// which make it small); maxEncoded is the most bytes an entry takes.
var logBlock = 64 << 10

const maxEncoded = 1 + 5*binary.MaxVarintLen64

// A spillFile is the temporary file that the entry logs of a recording
// spill their blocks to: a [spill.File] in dir (the system's temporary
// directory when dir is ""), made when the first block is written and
// left in no directory. It takes the blocks' bytes on disk, about 13 an
// entry. Its first failure is kept in err, and nothing is written after
// it: the replay goes on, and its snapshot fails with it.
type spillFile struct {
	dir string
	f   *spill.File
	err error // the first failure: making or writing the file
}

// write appends b and returns its offset.
func (s *spillFile) write(b []byte) int64 {
	if s.f == nil {
		s.f = spill.New(s.dir, ".snapshot-entries-")
	}
	at, err := s.f.Append(b)
	if err != nil && s.err == nil {
		s.err = fmt.Errorf("the file of the trace entries: %w", err)
	}
	return at
}

// close closes the file and removes it if it is still there.
func (s *spillFile) close() {
	if s != nil && s.f != nil {
		s.f.Close()
	}
}

func (l *entryLog) add(e *snapEntry) {
	if len(l.buf)+maxEncoded > logBlock {
		l.flush()
	}
	if l.buf == nil {
		l.buf = make([]byte, 0, logBlock)
	}
	b := append(l.buf, e.action|byte(e.cat)<<3)
	b = binary.AppendUvarint(b, e.addr)
	b = binary.AppendVarint(b, e.size)
	b = binary.AppendUvarint(b, e.stream)
	b = binary.AppendVarint(b, e.timeUS-l.last)
	if l.stacks {
		b = binary.AppendUvarint(b, uint64(e.stack))
	}
	l.buf = b
	l.last = e.timeUS
	l.n++
}

// flush ends the block being filled.
func (l *entryLog) flush() {
	if len(l.buf) == 0 {
		return
	}
	if l.spill != nil {
		l.at = append(l.at, spilled{l.spill.write(l.buf), len(l.buf)})
		l.buf = l.buf[:0]
		return
	}
	l.blocks = append(l.blocks, l.buf)
	l.buf = nil
}

// each calls f with each entry, oldest first, until f returns false. It
// reads the spilled blocks back one at a time into one buffer.
func (l *entryLog) each(f func(e *snapEntry) bool) error {
	var (
		e    snapEntry
		last int64
		tmp  []byte
	)
	decode := func(b []byte) (bool, error) {
		for len(b) > 0 {
			e.action, e.cat = b[0]&7, gpualloc.Category(b[0]>>3)
			b = b[1:]
			var k int
			if e.addr, k = binary.Uvarint(b); k <= 0 {
				return false, errLogDamaged
			}
			b = b[k:]
			if e.size, k = binary.Varint(b); k <= 0 {
				return false, errLogDamaged
			}
			b = b[k:]
			if e.stream, k = binary.Uvarint(b); k <= 0 {
				return false, errLogDamaged
			}
			b = b[k:]
			var dt int64
			if dt, k = binary.Varint(b); k <= 0 {
				return false, errLogDamaged
			}
			b = b[k:]
			if l.stacks {
				var st uint64
				if st, k = binary.Uvarint(b); k <= 0 || st > math.MaxUint32 {
					return false, errLogDamaged
				}
				b = b[k:]
				e.stack = uint32(st)
			}
			last += dt
			e.timeUS = last
			if !f(&e) {
				return false, nil
			}
		}
		return true, nil
	}
	for i, b := range l.blocks {
		if more, err := decode(b); !more || err != nil {
			return err
		}
		l.blocks[i] = nil // let go of each block once written
	}
	for _, sp := range l.at {
		if l.spill.err != nil {
			return l.spill.err
		}
		if tmp == nil {
			tmp = make([]byte, logBlock)
		}
		if err := l.spill.f.ReadAt(tmp[:sp.size], sp.at); err != nil {
			return fmt.Errorf("the file of the trace entries: %w", err)
		}
		if more, err := decode(tmp[:sp.size]); !more || err != nil {
			return err
		}
	}
	_, err := decode(l.buf)
	return err
}

var errLogDamaged = errors.New("the file of the trace entries is damaged")
