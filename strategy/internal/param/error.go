package param

import (
	"fmt"

	"github.com/gpualloc/gpualloc"
)

// Error returns the error a strategy's constructor reports for a parameter
// out of range. Its text names the strategy, the parameter and the value,
// written as fmt.Sprint writes it, as in "bestfit: round=300: must be a
// power of two of at least 256", and it wraps a [*gpualloc.ParamError],
// which [gpualloc.Params.Open] reports instead, naming the spec key or the
// environment variable the value came from.
func Error(strategy, key string, value any, msg string) error {
	return &paramError{strategy: strategy, value: fmt.Sprint(value), pe: gpualloc.ParamError{Key: key, Msg: msg}}
}

type paramError struct {
	strategy string
	value    string
	pe       gpualloc.ParamError
}

func (e *paramError) Error() string {
	return fmt.Sprintf("%s: %s=%s: %s", e.strategy, e.pe.Key, e.value, e.pe.Msg)
}

func (e *paramError) Unwrap() error { return &e.pe }
