// Package param reads a built-in strategy's resolved registry parameters
// into its Config, and opens the pool they configure: [Opener] makes a
// strategy's registry constructor of the two.
package param

import "github.com/gpualloc/gpualloc"

// A Reader reads the parameters of p one by one and keeps the first error,
// as bufio.Scanner does: after an error, reads return zero values, and
// [Reader.Err] reports it. So a strategy reads its Config in one composite
// literal, in the order of its parameters, and checks one error.
type Reader struct {
	p   *gpualloc.Params
	err error
}

// NewReader returns a Reader of p.
func NewReader(p *gpualloc.Params) *Reader { return &Reader{p: p} }

// Size returns the parameter key as a size in bytes ([gpualloc.Params.Size]).
func (r *Reader) Size(key string) int64 {
	if r.err != nil {
		return 0
	}
	n, err := r.p.Size(key)
	r.err = err
	return n
}

// Int returns the parameter key as an int. A value that is not an integer,
// or too large for an int, is an error naming where it came from; tooLarge
// says what a value too large is told, as "must be from 20 to 34".
func (r *Reader) Int(key, tooLarge string) int {
	if r.err != nil {
		return 0
	}
	n, err := r.p.Int(key)
	if err != nil {
		r.err = err
		return 0
	}
	if i := int(n); int64(i) == n {
		return i
	}
	r.err = r.p.Errorf(key, "%s", tooLarge)
	return 0
}

// Enum returns the parameter key parsed by parse; a value parse rejects is
// an error that tells it want, as "must be exact, chunk or double".
func Enum[T any](r *Reader, key string, parse func(string) (T, bool), want string) T {
	var v T
	if r.err != nil {
		return v
	}
	v, ok := parse(r.p.Value(key))
	if !ok {
		r.err = r.p.Errorf(key, "%s", want)
	}
	return v
}

// Err returns the first error of the reads, or nil.
func (r *Reader) Err() error { return r.err }

// Open returns the pool a strategy's constructor returns, as the
// [gpualloc.Allocator] a registry's New returns: nil, not a nil pool, with
// an error.
func Open[P gpualloc.Allocator](p P, err error) (gpualloc.Allocator, error) {
	if err != nil {
		return nil, err
	}
	return p, nil
}

// Opener returns a registry constructor ([gpualloc.Strategy.New]) that
// reads a Config with read from the resolved parameters, returns the first
// error of the reads, and otherwise opens the pool that newPool builds of
// that Config, as [Open] does.
func Opener[C any, P gpualloc.Allocator](read func(*Reader) C, newPool func(gpualloc.Backend, C) (P, error)) func(gpualloc.Backend, *gpualloc.Params) (gpualloc.Allocator, error) {
	return func(b gpualloc.Backend, p *gpualloc.Params) (gpualloc.Allocator, error) {
		r := NewReader(p)
		c := read(r)
		if err := r.Err(); err != nil {
			return nil, err
		}
		return Open(newPool(b, c))
	}
}
