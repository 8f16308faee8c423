package gpualloc

import (
	"fmt"
	"strings"
)

// A Category says what an allocation holds, in the terms of PyTorch's memory
// profiler (the Category of torch/profiler/_memory_profiler.py, whose names
// memory_viz's timeline shows): the model's parameters, the optimizer's
// state, inputs, activations, gradients, temporaries and autograd's
// internal buffers. Traces may record it (the optional category column of
// the native format); strategies that place long-lived and short-lived
// allocations apart learn it through [CategoryAllocator], and the others
// never see it. Its text is its name (String, UnmarshalText).
//
// The zero value is CategoryUnknown: a trace without categories, or an
// allocation whose recorder did not know what it held (PyTorch's None, shown
// as "unknown").
type Category uint8

// The categories, named as in memory_viz.
const (
	CategoryUnknown        Category = iota // "unknown": not recorded
	CategoryParameter                      // "parameter": a model's weights
	CategoryOptimizerState                 // "optimizer_state": an optimizer's moments and buffers
	CategoryInput                          // "input": a batch's inputs and labels
	CategoryActivation                     // "activation": outputs of the forward pass kept for the backward
	CategoryGradient                       // "gradient": gradients of the parameters
	CategoryTemporary                      // "temporary": short-lived buffers inside an operation
	CategoryAutogradDetail                 // "autograd_detail": autograd's intermediate gradients

	// NumCategories is the number of categories: every Category is below it.
	NumCategories = iota
)

var categoryNames = [NumCategories]string{
	CategoryUnknown:        "unknown",
	CategoryParameter:      "parameter",
	CategoryOptimizerState: "optimizer_state",
	CategoryInput:          "input",
	CategoryActivation:     "activation",
	CategoryGradient:       "gradient",
	CategoryTemporary:      "temporary",
	CategoryAutogradDetail: "autograd_detail",
}

// String returns the category's name, as "optimizer_state", or "category?"
// for a value that is no category.
func (c Category) String() string {
	if c < NumCategories {
		return categoryNames[c]
	}
	return "category?"
}

// UnmarshalText sets c to the category named text, matched without regard
// to case, as "Optimizer_State"; a name that is no category's is an error
// that leaves c as it was. It makes Category an encoding.TextUnmarshaler.
func (c *Category) UnmarshalText(text []byte) error {
	s := string(text)
	for i, name := range categoryNames {
		if strings.EqualFold(s, name) {
			*c = Category(i)
			return nil
		}
	}
	return fmt.Errorf("unknown category %q", s)
}

// CategoryAllocator is an optional interface of an [Allocator] that places an
// allocation by what it holds, as MindSpore's pool places static and dynamic
// memory at opposite ends of its block. A caller that knows the category of
// a request (a trace with a category column) uses AllocCategory instead of
// Alloc and AllocStream; a caller that does not passes CategoryUnknown, and
// the strategy then applies its own rule. Alloc is AllocCategory on stream
// 0 with CategoryUnknown.
type CategoryAllocator interface {
	AllocCategory(size int64, stream uint64, cat Category) (Block, error)
}
