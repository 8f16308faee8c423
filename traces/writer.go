package traces

import (
	"bufio"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/gpualloc/gpualloc"
)

// A Writer writes events in the native format: a "# gpualloc trace v1"
// comment, a header naming its columns, then a line per event. Ids are
// written as the text a reader made the ID from (see [Event].ID), and an
// interned token as "t" and a number, so the trace reads back with the same
// pairing of allocs and frees and the same IDs. A free's size and category
// are left empty, as the reader knows them from the allocation; its stream
// and device are written.
//
// Writes are buffered: call Flush or Close at the end. A Writer checks each
// event on its own (an alloc needs a size > 0, a trace with a time_us column
// needs every event's time) but keeps no state about the trace: a free of an
// id that is not live writes a trace that will not read back.
type Writer struct {
	bw      *bufio.Writer
	cols    []Column
	hasTime bool
	header  bool  // the header is written
	err     error // a bad column list or an error from the output

	gz   *gzip.Writer // from Create, for a .gz file
	file io.Closer    // from Create
}

// allColumns are the columns a Writer writes when it is given none: all but
// category, which only a trace that records categories needs.
var allColumns = []Column{ColOp, ColID, ColSize, ColStream, ColDevice, ColTime}

// NewWriter returns a Writer of a trace with the given columns, in that order
// (op and id are required), or, if none is given, op, id, size, stream,
// device and time_us: every column but category. A bad column
// list is reported by the first Write, Flush or Close.
func NewWriter(w io.Writer, cols ...Column) *Writer {
	if len(cols) == 0 {
		cols = allColumns
	}
	wr := &Writer{bw: bufio.NewWriterSize(w, 64<<10), cols: append([]Column(nil), cols...)}
	var seen [maxCols + 1]bool
	for _, c := range cols {
		switch {
		case c < ColOp || c > ColCategory:
			wr.err = fmt.Errorf("traces: bad writer column %d", c)
		case seen[c]:
			wr.err = fmt.Errorf("traces: writer column %s given twice", c)
		}
		if wr.err != nil {
			return wr
		}
		seen[c] = true
	}
	if !seen[ColOp] || !seen[ColID] {
		wr.err = errors.New("traces: writer columns must include op and id")
	}
	wr.hasTime = seen[ColTime]
	wr.bw.WriteString("# gpualloc trace v1\n")
	return wr
}

// Columns returns the columns the Writer writes.
func (w *Writer) Columns() []Column { return append([]Column(nil), w.cols...) }

// Comment writes text as comment lines, each line of text prefixed with
// "# ". Comments written before the first event come before the header.
func (w *Writer) Comment(text string) error {
	if w.err != nil {
		return w.err
	}
	for line := range strings.SplitSeq(text, "\n") {
		w.bw.WriteString("#")
		if line != "" {
			w.bw.WriteString(" ")
			w.bw.WriteString(strings.TrimSuffix(line, "\r"))
		}
		w.bw.WriteString("\n")
	}
	return w.ioErr()
}

func (w *Writer) writeHeader() {
	for i, c := range w.cols {
		if i > 0 {
			w.bw.WriteByte(',')
		}
		w.bw.WriteString(c.String())
	}
	w.bw.WriteByte('\n')
	w.header = true
}

// maxLine bounds the length of an event's line: six numbers of at most 20
// digits, a category name and their separators.
const maxLine = 160

// Write writes one event. A bad event (an unknown op, an alloc without a
// positive size, a negative device, a category that is none, no time in a
// trace with a time_us column) is an error that writes nothing and leaves the Writer usable; an
// error from the output is returned by every later call.
func (w *Writer) Write(ev Event) error {
	if w.err != nil {
		return w.err
	}
	if !w.header {
		w.writeHeader()
	}
	switch {
	case ev.Op != OpAlloc && ev.Op != OpFree && ev.Op != OpRelease:
		return fmt.Errorf("traces: write of an event with bad op %d", ev.Op)
	case ev.Op == OpAlloc && ev.Size <= 0:
		return fmt.Errorf("traces: write of an alloc of id %s with size %d: size must be > 0", formatID(ev.ID), ev.Size)
	case ev.Device < 0:
		return fmt.Errorf("traces: write of an event of id %s with device %d: device must be >= 0", formatID(ev.ID), ev.Device)
	case ev.Category >= gpualloc.NumCategories:
		return fmt.Errorf("traces: write of an event of id %s with bad category %d", formatID(ev.ID), ev.Category)
	case w.hasTime && ev.TimeUS < 0:
		return fmt.Errorf("traces: write of an event of id %s without a time to a trace with a time_us column", formatID(ev.ID))
	}
	if w.bw.Available() < maxLine {
		if err := w.bw.Flush(); err != nil {
			return w.ioErr()
		}
	}
	b := w.bw.AvailableBuffer()
	for i, c := range w.cols {
		if i > 0 {
			b = append(b, ',')
		}
		switch c {
		case ColOp:
			b = append(b, ev.Op.String()...)
		case ColID:
			if ev.Op != OpRelease {
				b = appendID(b, ev.ID)
			}
		case ColSize:
			if ev.Op == OpAlloc {
				b = strconv.AppendInt(b, ev.Size, 10)
			}
		case ColStream:
			b = strconv.AppendUint(b, ev.Stream, 10)
		case ColDevice:
			b = strconv.AppendInt(b, int64(ev.Device), 10)
		case ColTime:
			b = strconv.AppendInt(b, ev.TimeUS, 10)
		case ColCategory:
			if ev.Op == OpAlloc {
				b = append(b, ev.Category.String()...)
			}
		}
	}
	b = append(b, '\n')
	if _, err := w.bw.Write(b); err != nil {
		w.err = err
	}
	return w.err
}

// ioErr makes an error of the output sticky.
func (w *Writer) ioErr() error {
	if w.err == nil {
		if _, err := w.bw.Write(nil); err != nil {
			w.err = err
		}
	}
	return w.err
}

// Flush writes the header if no event has written it yet, and any buffered
// data to the output.
func (w *Writer) Flush() error {
	if w.err != nil {
		return w.err
	}
	if !w.header {
		w.writeHeader()
	}
	if err := w.bw.Flush(); err != nil {
		w.err = err
	}
	return w.err
}

// Close flushes the Writer; for a Writer from [Create] it also ends the gzip
// stream and closes the file. It does not close an io.Writer given to
// [NewWriter].
func (w *Writer) Close() error {
	err := w.Flush()
	if w.gz != nil {
		if cerr := w.gz.Close(); err == nil {
			err = cerr
		}
		w.gz = nil
	}
	if w.file != nil {
		if cerr := w.file.Close(); err == nil {
			err = cerr
		}
		w.file = nil
	}
	return err
}
