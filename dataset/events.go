package dataset

import (
	"fmt"
	"io"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress/zstd"
)

// Event is one replayed event of one strategy's replay of one device: a
// row of events.parquet. The column names are the parquet tags.
type Event struct {
	Trace     string `parquet:"trace,dict"`            // the input's name
	Device    int32  `parquet:"device"`                // the device the trace is of
	Strategy  string `parquet:"strategy,dict"`         // the spec replayed, e.g. "pytorch" or "recorded"
	Index     int64  `parquet:"index,delta"`           // the event's index in the device's trace
	TimeUS    int64  `parquet:"time_us,delta"`         // recorded time in microseconds, -1 when the trace records none
	Action    string `parquet:"action,dict"`           // "alloc", "free", ... as the trace names it
	Size      int64  `parquet:"size"`                  // the event's size in bytes
	Address   uint64 `parquet:"address"`               // the event's address
	Site      string `parquet:"site,dict"`             // the call site (as explain names it), "" when unknown
	Live      int64  `parquet:"live_bytes,delta"`      // bytes live after the event
	Allocated int64  `parquet:"allocated_bytes,delta"` // bytes allocated (rounded blocks) after the event
	Reserved  int64  `parquet:"reserved_bytes,delta"`  // bytes reserved from the device after the event
}

// RowGroupRows is the most rows a row group of an events file holds. A
// writer holds one row group's encoded pages in memory (a few MiB at
// this size), and DuckDB and Polars read row groups in parallel.
const RowGroupRows = 1 << 17

// batchRows is how many rows an EventWriter gathers before handing them
// to the Parquet writer, which encodes them column by column.
const batchRows = 1024

// An EventWriter writes Events as a Parquet file, one row each, in the
// order written. It is not safe for concurrent use.
//
// Write copies the event into a batch of fixed size, so that writing
// allocates nothing per row beyond the amortized growth of the encoder's
// buffers and dictionaries; memory is bounded by one row group
// ([RowGroupRows]) and the distinct strings of the file's dictionaries.
type EventWriter struct {
	name  string // for errors: the file's path, or "" for an io.Writer
	f     *file  // nil when writing to an io.Writer
	pw    *parquet.GenericWriter[Event]
	batch []Event
	err   error // the first error, returned by every later call
}

// writerOptions are the options of every file this package writes.
func writerOptions() []parquet.WriterOption {
	return []parquet.WriterOption{
		parquet.Compression(&zstd.Codec{Level: zstd.SpeedFastest}),
		parquet.MaxRowsPerRowGroup(RowGroupRows),
		parquet.CreatedBy("gpualloc", "", ""),
	}
}

// CreateEvents starts an events file at path. Rows are buffered into row
// groups, and the file appears at path only when Close succeeds: it is
// written under a temporary name beside path and renamed into place.
// Abort, or a failed Close, removes the temporary and leaves path as it
// was.
func CreateEvents(path string) (*EventWriter, error) {
	f, err := create(path)
	if err != nil {
		return nil, err
	}
	w := newEventWriter(f)
	w.name, w.f = path, f
	return w, nil
}

// NewEventWriter starts an events file written to out, for a caller that
// manages the file itself. Close writes the file's footer and does not
// close out; a file abandoned before Close is not valid Parquet.
func NewEventWriter(out io.Writer) *EventWriter {
	return newEventWriter(out)
}

func newEventWriter(out io.Writer) *EventWriter {
	return &EventWriter{
		pw:    parquet.NewGenericWriter[Event](out, writerOptions()...),
		batch: make([]Event, 0, batchRows),
	}
}

// Write adds e as the file's next row. Its strings are copied by the
// time Write returns or at the latest by the next Write, so the caller
// may reuse e.
func (w *EventWriter) Write(e *Event) error {
	if w.err != nil {
		return w.err
	}
	w.batch = append(w.batch, *e)
	if len(w.batch) == cap(w.batch) {
		return w.flushBatch()
	}
	return nil
}

// flushBatch hands the gathered rows to the Parquet writer.
func (w *EventWriter) flushBatch() error {
	if len(w.batch) == 0 {
		return nil
	}
	_, err := w.pw.Write(w.batch)
	clear(w.batch) // drop the strings' references
	w.batch = w.batch[:0]
	if err != nil {
		w.fail(err)
	}
	return w.err
}

// fail records err as the writer's error, naming the file.
func (w *EventWriter) fail(err error) {
	if w.err == nil {
		if w.name != "" {
			err = fmt.Errorf("dataset: %s: %w", w.name, err)
		} else {
			err = fmt.Errorf("dataset: %w", err)
		}
		w.err = err
	}
	w.Abort()
}

// Close writes the rows still buffered and the file's footer, and
// renames the file into place when CreateEvents created it. After an
// error, the file is removed and Close returns the first error.
func (w *EventWriter) Close() error {
	if w.err != nil {
		return w.err
	}
	if err := w.flushBatch(); err != nil {
		return err
	}
	if err := w.pw.Close(); err != nil {
		w.fail(err)
		return w.err
	}
	w.err = errClosed
	if w.f != nil {
		return w.f.commit()
	}
	return nil
}

// errClosed is the error of a Write or Close after Close.
var errClosed = fmt.Errorf("dataset: events file already closed")

// Abort abandons the file: the temporary is removed and nothing appears
// at the path. Abort after a successful Close does nothing, so it may be
// deferred.
func (w *EventWriter) Abort() {
	if w.f != nil {
		w.f.abort()
	}
	if w.err == nil {
		w.err = fmt.Errorf("dataset: events file aborted")
	}
}

// Append adds the rows of the events file held in src, of size bytes, in
// their order: a file written apart (by a replay running beside others)
// joins this one. It reads src a row group's pages at a time. An error
// reading src fails the writer, which may hold part of src's rows.
func (w *EventWriter) Append(src io.ReaderAt, size int64) (int64, error) {
	if w.err != nil {
		return 0, w.err
	}
	f, err := parquet.OpenFile(src, size)
	if err != nil {
		w.fail(fmt.Errorf("reading an events file: %w", err))
		return 0, w.err
	}
	r := parquet.NewGenericReader[Event](f)
	defer r.Close()
	var n int64
	buf := make([]Event, batchRows)
	for {
		k, err := r.Read(buf)
		for i := range k {
			if werr := w.Write(&buf[i]); werr != nil {
				return n, werr
			}
			n++
		}
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			w.fail(fmt.Errorf("reading an events file: %w", err))
			return n, w.err
		}
	}
}
