package traces

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/gpualloc/gpualloc"
)

// Every format's reader is built the same way: the format decodes its lines
// or records into an Event, and a checker, which the reader embeds, makes a
// valid trace of them. The checker pairs each free with its live allocation
// (interning ids that are not numbers), gives allocations their slots, keeps
// times in order, applies the lenient policy and makes the errors, which
// name the record's position. It also answers the methods of a FileReader
// that are not about decoding (Name, Format, Columns, HasTime, Skipped, ...),
// so that a format's reader has only Scan to write.
//
// The checker is a concrete struct with small methods, so that the native
// reader's loop calls it without interface calls: its cost per event is a
// lookup or insert in the table of live allocations.

// A checker is the state of a trace that a format's reader yields: the live
// allocations, the previous event's time, what was skipped, the error that
// ended the trace.
type checker struct {
	name    string
	format  string
	cols    []Column
	lenient bool
	clamp   bool   // a time before the previous event's is raised to it, not an error
	words   *vocab // the format's words in messages about pairing

	// The position of the current record, for errors: its line, or where
	// for formats whose records are not lines.
	line  int64
	where func() string

	ev   Event // the current event
	err  error // the error that ended the trace, or nil
	last int64 // the previous event's time, or NoTime

	live      liveTable
	liveBytes int64             // the sizes of the live allocations, summed: never past math.MaxInt64
	tokens    map[string]uint64 // interned ids of live allocations
	nextToken uint64            // counts allocations of interned ids
	freeSlots []int32           // released slots, reused last in, first out
	nslots    int32

	// With categories (a trace that records them), cats holds the category
	// of the live allocation in each slot, beside the live table: a free
	// takes its allocation's. A trace without categories leaves it nil and
	// pays one branch an event.
	hasCat bool
	cats   []gpualloc.Category

	failures  int64   // failed allocations the trace records (not events)
	devFails  []int64 // failures by device index
	skipped   int64
	firstSkip error
	file      io.Closer // the file Open opened, closed by Close
}

// A vocab holds the words of a format's messages about pairing, so that
// the messages speak the format's language: "free of unknown id 7",
// "allocate of pointer 0x10 that is already live".
type vocab struct {
	alloc, free string // the names of the ops
	id          string // the noun before an id, with its space ("id ", "pointer "), or ""
	unknown     string // the message about a free of an id that is not live, %s the id
}

// A record is what a format decodes of an event besides its fields, which
// it puts in the checker's ev.
type record struct {
	tok []byte // the id, when it is not a number (see idKey); else ev.ID holds it
	// On a free, whether the record gives the size, stream, device and
	// category, which must then be the allocation's (an alloc must give
	// its size).
	hasSize, hasStream, hasDevice, hasCategory bool
}

// errQuiet stands for the errors of events skipped after the first in
// lenient mode, which nobody reads: formatting them would only cost time.
var errQuiet = errors.New("bad event")

// init readies c for a trace named name, in the given format.
func (c *checker) init(name, format string, cols []Column, opts Options, words *vocab) {
	c.name, c.format, c.cols, c.lenient, c.words = name, format, cols, opts.Lenient, words
	c.last = NoTime
	c.live.init(10)
	c.setColumns(cols)
}

// setColumns notes the columns of the trace, once they are known.
func (c *checker) setColumns(cols []Column) {
	c.cols = cols
	c.hasCat = slices.Contains(cols, ColCategory)
}

// event checks c.ev, which the format decoded with rec, against the live
// allocations and the previous event's time, and completes it: an alloc
// gets its slot (and, if its id is a token, an ID), a free the slot, size,
// stream and device of its allocation. A bad event is an error that leaves
// the state as it was.
func (c *checker) event(rec *record) error {
	ev := &c.ev
	if ev.TimeUS < c.last {
		if !c.clamp {
			return c.errorf("time_us %d is before the previous event's %d", ev.TimeUS, c.last)
		}
		ev.TimeUS = c.last
	}
	if ev.Op == OpRelease {
		ev.ID, ev.Size, ev.Slot, ev.Stream = 0, 0, 0, 0
		c.last = ev.TimeUS
		return nil
	}
	if ev.Op == OpAlloc {
		if !rec.hasSize {
			return c.errorf("missing size on %s of %s%s", c.words.alloc, c.words.id, c.idText(rec))
		}
		if ev.Size > math.MaxInt64-c.liveBytes {
			// Every sum of live sizes downstream (peak live bytes, a
			// replay's lower bound) then fits in an int64.
			return c.errorf("%s of %s%s (%d bytes) takes the live bytes past 2^63-1 (8 EiB), more than a trace can sum", c.words.alloc, c.words.id, c.idText(rec), ev.Size)
		}
		if rec.tok != nil {
			if _, live := c.tokens[string(rec.tok)]; live {
				return c.errorf("%s of %s%s that is already live", c.words.alloc, c.words.id, c.idText(rec))
			}
			ev.ID = idTokenTag | c.nextToken
		}
		ev.Slot = c.nslots
		if n := len(c.freeSlots); n > 0 {
			ev.Slot = c.freeSlots[n-1]
		}
		if !c.live.insert(liveInfo{key: ev.ID, size: ev.Size, stream: ev.Stream, slot: ev.Slot, device: ev.Device}) {
			return c.errorf("%s of %s%s that is already live", c.words.alloc, c.words.id, c.idText(rec))
		}
		c.liveBytes += ev.Size
		if n := len(c.freeSlots); n > 0 {
			c.freeSlots = c.freeSlots[:n-1]
		} else {
			c.nslots++
		}
		if c.hasCat {
			if int(ev.Slot) >= len(c.cats) {
				c.cats = append(c.cats, make([]gpualloc.Category, int(ev.Slot)+1-len(c.cats))...)
			}
			c.cats[ev.Slot] = ev.Category
		}
		if rec.tok != nil {
			if c.tokens == nil {
				c.tokens = map[string]uint64{}
			}
			c.tokens[string(rec.tok)] = ev.ID
			c.nextToken++
		}
	} else {
		if rec.tok != nil {
			k, ok := c.tokens[string(rec.tok)]
			if !ok {
				return c.errorf(c.words.unknown, c.idText(rec))
			}
			ev.ID = k
		}
		i := c.live.find(ev.ID)
		if i < 0 {
			return c.errorf(c.words.unknown, c.idText(rec))
		}
		a := &c.live.e[i]
		switch {
		case rec.hasSize && ev.Size != a.size:
			return c.errorf("%s of %s%s with size %d, allocated with size %d", c.words.free, c.words.id, c.idText(rec), ev.Size, a.size)
		case rec.hasStream && ev.Stream != a.stream:
			return c.errorf("%s of %s%s on stream %d, allocated on stream %d", c.words.free, c.words.id, c.idText(rec), ev.Stream, a.stream)
		case rec.hasDevice && ev.Device != a.device:
			return c.errorf("%s of %s%s on device %d, allocated on device %d", c.words.free, c.words.id, c.idText(rec), ev.Device, a.device)
		}
		if c.hasCat {
			cat := c.cats[a.slot]
			if rec.hasCategory && ev.Category != cat {
				return c.errorf("%s of %s%s with category %s, allocated with category %s", c.words.free, c.words.id, c.idText(rec), ev.Category, cat)
			}
			ev.Category = cat
		}
		ev.Slot, ev.Size, ev.Stream, ev.Device = a.slot, a.size, a.stream, a.device
		c.liveBytes -= a.size
		c.live.removeAt(i)
		c.freeSlots = append(c.freeSlots, ev.Slot)
		if rec.tok != nil {
			delete(c.tokens, string(rec.tok))
		}
	}
	c.last = ev.TimeUS
	return nil
}

// observe notes the time t of a record that is not an event (RMM's failed
// allocations): in a trace whose times are raised, later events do not come
// before it.
func (c *checker) observe(t int64) {
	c.last = max(c.last, t)
}

// idText returns the id of the current record as written, for messages.
func (c *checker) idText(rec *record) string {
	if rec.tok != nil {
		return quote(rec.tok)
	}
	return formatID(c.ev.ID)
}

// reject applies the lenient policy to err, the error of a bad event. In
// lenient mode it counts the event as skipped and returns nil, for the
// reader to go on with the next record; otherwise it returns err, which
// ends the trace.
func (c *checker) reject(err error) error {
	if !c.lenient {
		return err
	}
	c.skipped++
	if c.firstSkip == nil {
		c.firstSkip = err
	}
	return nil
}

// errorf returns the error of a bad event at the current position: a
// *ParseError, or errQuiet when it could only be skipped without a word.
func (c *checker) errorf(format string, args ...any) error {
	if c.lenient && c.firstSkip != nil {
		return errQuiet
	}
	return c.fatalf(format, args...)
}

// fatalf returns a *ParseError at the current position, for an error that
// ends the trace even in lenient mode.
func (c *checker) fatalf(format string, args ...any) *ParseError {
	msg := fmt.Sprintf(format, args...)
	if c.where != nil {
		return &ParseError{Name: c.name, Msg: c.where() + ": " + msg}
	}
	return &ParseError{Name: c.name, Line: c.line, Msg: msg}
}

// notTrace returns an error wrapping ErrNotTrace that says why.
func (c *checker) notTrace(why string) *ParseError {
	return &ParseError{Name: c.name, Msg: ErrNotTrace.Error() + " (" + why + ")", Err: ErrNotTrace}
}

// readLine returns the next line of br that is not blank, without its line
// ending, nor on the first line a byte order mark, counting lines in
// c.line; it is for the formats whose lines are short and few enough for a
// bufio.Reader of maxLineBytes. At the end of the input or on an error,
// which it stores in c.err, it returns false.
func (c *checker) readLine(br *bufio.Reader) ([]byte, bool) {
	for c.err == nil {
		line, err := br.ReadSlice('\n')
		if len(line) == 0 && err == io.EOF {
			return nil, false
		}
		c.line++
		switch {
		case err == bufio.ErrBufferFull:
			c.err = c.fatalf("line too long (more than %d bytes)", maxLineBytes)
			return nil, false
		case err != nil && err != io.EOF:
			c.err = sourceError(c.name, c.line, err)
			return nil, false
		}
		line = bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r"))
		if c.line == 1 {
			line = bytes.TrimPrefix(line, []byte("\xef\xbb\xbf"))
		}
		if len(trimSpace(line)) > 0 {
			return line, true
		}
	}
	return nil, false
}

// Event returns the event that the last call to Scan found.
func (c *checker) Event() Event { return c.ev }

// Err returns the error that ended the trace, or nil at its clean end.
func (c *checker) Err() error { return c.err }

// Name returns the trace's name, as used in errors.
func (c *checker) Name() string { return c.name }

// Format returns the name of the trace's format.
func (c *checker) Format() string { return c.format }

// MidRun reports whether the trace is a PyTorch memory snapshot's.
func (c *checker) MidRun() bool { return c.format == pytorchFormatName }

// Columns returns the native columns that hold what the trace records.
func (c *checker) Columns() []Column { return slices.Clone(c.cols) }

// HasTime reports whether the events have times.
func (c *checker) HasTime() bool { return slices.Contains(c.cols, ColTime) }

// Skipped returns the number of bad events skipped so far in lenient mode.
func (c *checker) Skipped() int64 { return c.skipped }

// FirstSkipped returns the error of the first bad event skipped in lenient
// mode, or nil.
func (c *checker) FirstSkipped() error { return c.firstSkip }

// AllocFailures returns the number of failed allocations read so far.
func (c *checker) AllocFailures() int64 { return c.failures }

// DeviceAllocFailures returns the number of failed allocations read so far
// on device dev; they add up to AllocFailures over the devices.
func (c *checker) DeviceAllocFailures(dev int32) int64 {
	if dev < 0 || int(dev) >= len(c.devFails) {
		return 0
	}
	return c.devFails[dev]
}

// countFailure counts a failed allocation on device dev.
func (c *checker) countFailure(dev int32) {
	c.failures++
	if dev < 0 {
		return
	}
	if int(dev) >= len(c.devFails) {
		c.devFails = append(c.devFails, make([]int64, int(dev)+1-len(c.devFails))...)
	}
	c.devFails[dev]++
}

// Live returns the number of live allocations after the last event found.
func (c *checker) Live() int { return c.live.n }

// Slots returns the number of distinct slots handed out so far, which is the
// peak number of live allocations: every Event.Slot so far is below it.
func (c *checker) Slots() int { return int(c.nslots) }

// Close closes the file the reader was opened from, if it owns one.
func (c *checker) Close() error {
	if c.file == nil {
		return nil
	}
	err := c.file.Close()
	c.file = nil
	return err
}

// core returns the checker, for the functions that make readers.
func (c *checker) core() *checker { return c }
