package dualcursor

import (
	"fmt"
	"math/bits"
	"strings"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/internal/param"
)

// Growth is what a [Pool] does when neither a freed range nor the gap
// between the cursors of any block holds a request.
type Growth uint8

const (
	// GrowBlock takes another block from the device, of Config.Block
	// bytes, or of the request if that is larger.
	GrowBlock Growth = iota
	// GrowNone never takes a second block: the request fails with
	// [gpualloc.ErrOutOfMemory], as MindSpore's MemoryManager fails with
	// "Out of memory!!!" when its cursors would cross.
	GrowNone
)

var growthNames = [...]string{GrowBlock: "block", GrowNone: "none"}

// String returns the name of g in a spec: "block" or "none".
func (g Growth) String() string { return param.Name(growthNames[:], "Growth", g) }

func parseGrowth(s string) (Growth, bool) { return param.ParseFold[Growth](growthNames[:], s) }

// Unknown is the rule that says where an allocation of unknown category
// goes: a trace without categories, or an allocation its recorder could
// not name. Every rule decides from what the pool has seen so far, never
// from the future of the trace.
type Unknown uint8

const (
	// UnknownBeforeFirstFree makes static every allocation of unknown
	// category made before the pool's first free, and dynamic every later
	// one: a model's weights are allocated, and live, before its first
	// step frees anything.
	UnknownBeforeFirstFree Unknown = iota
	// UnknownDynamic makes every allocation of unknown category dynamic.
	UnknownDynamic
	// UnknownStatic makes every allocation of unknown category static.
	UnknownStatic
)

var unknownNames = [...]string{UnknownBeforeFirstFree: "before_first_free", UnknownDynamic: "dynamic", UnknownStatic: "static"}

// String returns the name of u in a spec: "before_first_free", "dynamic"
// or "static".
func (u Unknown) String() string { return param.Name(unknownNames[:], "Unknown", u) }

func parseUnknown(s string) (Unknown, bool) { return param.ParseFold[Unknown](unknownNames[:], s) }

// End is the end of a block where static memory starts.
type End uint8

const (
	// EndHigh places static memory from the block's high end downward and
	// dynamic memory from its low end upward, as MindSpore's MemoryManager
	// does (static_mem_offset_ starts at the device memory's size and
	// decreases; dynamic_mem_offset_ starts at 0 and increases).
	EndHigh End = iota
	// EndLow places static memory from the low end upward and dynamic
	// memory from the high end downward: the mirror image, which changes
	// addresses and nothing else.
	EndLow
)

var endNames = [...]string{EndHigh: "high", EndLow: "low"}

// String returns the name of e in a spec: "high" or "low".
func (e End) String() string { return param.Name(endNames[:], "End", e) }

func parseEnd(s string) (End, bool) { return param.ParseFold[End](endNames[:], s) }

// A CategorySet is a set of [gpualloc.Category] values, one bit each.
type CategorySet uint16

// Categories returns the set of the given categories.
func Categories(cs ...gpualloc.Category) CategorySet {
	var s CategorySet
	for _, c := range cs {
		s |= 1 << c
	}
	return s
}

// Has reports whether c is in s.
func (s CategorySet) Has(c gpualloc.Category) bool { return s&(1<<c) != 0 }

// String returns the set in a spec: its categories' names joined by "+",
// in the order of [gpualloc.Category], or "none" for the empty set.
func (s CategorySet) String() string {
	if s == 0 {
		return "none"
	}
	var names []string
	for c := gpualloc.Category(0); c < gpualloc.NumCategories; c++ {
		if s.Has(c) {
			names = append(names, c.String())
		}
	}
	if s>>gpualloc.NumCategories != 0 {
		names = append(names, fmt.Sprintf("%#x", uint16(s>>gpualloc.NumCategories<<gpualloc.NumCategories)))
	}
	return strings.Join(names, "+")
}

// parseCategorySet parses "parameter+optimizer_state" or "none"; unknown is
// refused, as the unknown rule places it.
func parseCategorySet(v string) (CategorySet, bool) {
	if strings.EqualFold(v, "none") {
		return 0, true
	}
	var s CategorySet
	for name := range strings.SplitSeq(v, "+") {
		var c gpualloc.Category
		if c.UnmarshalText([]byte(strings.TrimSpace(name))) != nil || c == gpualloc.CategoryUnknown {
			return 0, false
		}
		s |= 1 << c
	}
	return s, true
}

// staticWant is what a bad static set is told.
const staticWant = "must be categories joined by + (parameter, optimizer_state, input, activation, gradient, temporary, autograd_detail) or none; unknown follows the unknown rule"

// Config are the parameters of a dual-cursor pool. Every size is in bytes.
type Config struct {
	// Align and Pad make the size of a block: a request of n bytes takes
	// (n + Pad) rounded up to a multiple of Align, as MindSpore's
	// GetCommonAlignSize does with its kMemAlignSize of 512 and 32 bytes
	// of padding. Align is a power of two of at least 256 (the alignment
	// cudaMalloc guarantees, so that every block is as aligned); Pad is not
	// negative.
	Align int64
	Pad   int64

	// Block is the size of the blocks taken from the device, rounded up to
	// a multiple of Align; a request larger than Block gets a block of its
	// own size. 0 means all the device's free memory at the time (rounded
	// down to a multiple of Align), as MindSpore takes the whole device at
	// initialisation.
	Block int64

	// Grow says whether the pool takes another block when no block has
	// room for a request: GrowBlock, or GrowNone (one block only).
	Grow Growth

	// Static are the categories placed as static memory, from the static
	// end of a block; every other known category is dynamic. It never
	// holds CategoryUnknown, which Unknown decides.
	Static CategorySet

	// Unknown is the rule for allocations of unknown category.
	Unknown Unknown

	// StaticEnd is the end of each block where static memory starts.
	StaticEnd End
}

// DefaultConfig returns the defaults: MindSpore's 512-byte alignment with 32
// bytes of padding, blocks of 1 GiB taken as needed, parameters and
// optimizer state static, allocations of unknown category static before the
// first free, static memory from the high end.
func DefaultConfig() Config {
	return Config{
		Align:   512,
		Pad:     32,
		Block:   1 << 30,
		Grow:    GrowBlock,
		Static:  Categories(gpualloc.CategoryParameter, gpualloc.CategoryOptimizerState),
		Unknown: UnknownBeforeFirstFree,
	}
}

// RoundSize returns the size of the block a pool of configuration c sets
// aside for a request of size bytes: size + Pad rounded up to a multiple of
// Align. It returns 0 for a size below 1 and for one whose block would not
// fit in an int64. c must be valid (see [New]).
func (c Config) RoundSize(size int64) int64 {
	if size < 1 || size > 1<<63-1-c.Pad {
		return 0
	}
	s := (uint64(size+c.Pad) + uint64(c.Align) - 1) &^ (uint64(c.Align) - 1)
	if s > 1<<63-1 {
		return 0
	}
	return int64(s)
}

// IsStatic reports whether an allocation of category cat is static, for a
// pool that has (freed) or has not yet freed a block.
func (c Config) IsStatic(cat gpualloc.Category, freed bool) bool {
	if cat != gpualloc.CategoryUnknown {
		return c.Static.Has(cat)
	}
	switch c.Unknown {
	case UnknownStatic:
		return true
	case UnknownBeforeFirstFree:
		return !freed
	}
	return false
}

// validate reports the first parameter of c out of range, as an error that
// names it and wraps a [*gpualloc.ParamError].
func (c Config) validate() error {
	switch {
	case c.Align < 256 || bits.OnesCount64(uint64(c.Align)) != 1:
		return param.Error(name, "align", fmt.Sprint(c.Align), "must be a power of two of at least 256")
	case c.Pad < 0:
		return param.Error(name, "pad", fmt.Sprint(c.Pad), "must not be negative")
	case c.Block < 0:
		return param.Error(name, "block", fmt.Sprint(c.Block), "must not be negative (0: the device's free memory)")
	case c.Grow > GrowNone:
		return param.Error(name, "grow", c.Grow.String(), "must be block or none")
	case c.Static>>gpualloc.NumCategories != 0 || c.Static.Has(gpualloc.CategoryUnknown):
		return param.Error(name, "static", c.Static.String(), staticWant)
	case c.Unknown > UnknownStatic:
		return param.Error(name, "unknown", c.Unknown.String(), "must be before_first_free, dynamic or static")
	case c.StaticEnd > EndLow:
		return param.Error(name, "static_end", c.StaticEnd.String(), "must be high or low")
	}
	return nil
}
