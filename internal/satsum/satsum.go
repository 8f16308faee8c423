// Package satsum adds byte counts that only grow (the bytes of all device
// allocations over a run) without wrapping: a sum that would pass
// math.MaxInt64 stays there, so that a result reads "at least 8 EiB" rather
// than a negative number.
package satsum

import "math"

// Add returns a+b for non-negative a and b, or math.MaxInt64 when the sum
// does not fit in an int64. It costs one comparison.
func Add(a, b int64) int64 {
	if b > math.MaxInt64-a {
		return math.MaxInt64
	}
	return a + b
}
