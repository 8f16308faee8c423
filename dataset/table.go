package dataset

import (
	"fmt"
	"io"
	"reflect"

	"github.com/parquet-go/parquet-go"
)

// WriteTable writes rows as one Parquet file at path, atomically: the
// file is written beside path under a temporary name and renamed into
// place once complete, and a failure leaves path as it was.
//
// T is a struct type; each exported field is a column, named by its
// `parquet:"name"` tag as parquet-go's schemas read it (with options
// such as "dict" for a string column of few distinct values, or
// "optional"). A T that is no struct, or has a field Parquet cannot
// hold, is an error. The whole table is held in memory by the caller;
// for rows by the million, stream them with an [EventWriter].
func WriteTable[T any](path string, rows []T) error {
	f, err := create(path)
	if err != nil {
		return err
	}
	defer f.abort()
	pw, err := newWriter[T](f)
	if err != nil {
		return fmt.Errorf("dataset: %s: %w", path, err)
	}
	if _, err := pw.Write(rows); err != nil {
		return fmt.Errorf("dataset: %s: %w", path, err)
	}
	if err := pw.Close(); err != nil {
		return fmt.Errorf("dataset: %s: %w", path, err)
	}
	return f.commit()
}

// newWriter returns a Parquet writer of T's rows to out, or an error
// where T is no struct or parquet-go cannot derive a schema from it
// (which it reports by panicking).
func newWriter[T any](out io.Writer) (pw *parquet.GenericWriter[T], err error) {
	typ := reflect.TypeFor[T]()
	if typ.Kind() != reflect.Struct {
		return nil, fmt.Errorf("rows of %v: a table's rows must be structs", typ)
	}
	defer func() {
		if r := recover(); r != nil {
			pw, err = nil, fmt.Errorf("rows of %v: %v", typ, r)
		}
	}()
	return parquet.NewGenericWriter[T](out, writerOptions()...), nil
}
