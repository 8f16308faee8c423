// Package dataset writes what a replay computes as Parquet files, for
// notebooks: pandas, Polars and DuckDB read them with their types, where a
// CSV of millions of rows is slow to parse and loses them.
//
// An [EventWriter] streams one row per replayed event ([Event]): the
// event's index, time, action, size and address, its call site, and the
// live, allocated and reserved bytes after it, which together are the
// replay's memory curve. [WriteTable] writes any small table, such as the
// bytes per call site, from a slice of structs.
//
// Every file is written beside its destination under a temporary name and
// renamed into place only when complete: a reader never sees half a file,
// and a failed or abandoned write leaves nothing behind.
//
// The files use Parquet's own types: integers are INT64 (an address is an
// unsigned INT64), strings are UTF-8 byte arrays, dictionary-encoded where
// few distinct values repeat (trace, strategy, action, site), and pages are
// compressed with zstd. Rows are gathered into row groups of at most
// [RowGroupRows] rows, so that writing holds one row group in memory
// however long the trace, and readers can read row groups in parallel.
//
// In DuckDB:
//
//	SELECT strategy, max(reserved_bytes) FROM 'events.parquet' GROUP BY strategy;
//
// In pandas:
//
//	pd.read_parquet("events.parquet")
package dataset
