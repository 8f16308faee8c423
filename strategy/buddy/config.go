package buddy

import (
	"fmt"
	"math/bits"

	"github.com/gpualloc/gpualloc/strategy/internal/param"
)

// maxBlock is the largest block: the largest power of two in an int64.
const maxBlock = 1 << 62

// Config are the parameters of a buddy [Pool].
type Config struct {
	// MinBlock is the smallest block, in bytes: every request is rounded
	// up to a power of two of at least MinBlock bytes, and blocks are never
	// split below it. It must be a power of two.
	MinBlock int64

	// Arena is how many bytes the pool takes from the device at a time,
	// the block that buddies are split from and merged back into. A request
	// larger than Arena gets an arena of its own rounded size. When the
	// device refuses an arena of Arena bytes, even after the pool has
	// returned its entirely free arenas, the pool asks for arenas of half
	// the size, halving down to the rounded size of the request, and takes
	// the first one the device grants: a device smaller than Arena bytes is
	// used all the same, in smaller arenas. It must be a power of two of at
	// least MinBlock.
	Arena int64
}

// DefaultConfig returns the defaults: 512-byte minimum blocks, 1 GiB
// arenas.
func DefaultConfig() Config {
	return Config{MinBlock: 512, Arena: 1 << 30}
}

// RoundSize returns the size of the block a pool with configuration c hands
// out for a request of size bytes: the smallest power of two that is at
// least size and at least MinBlock. It returns 0 for a size below 1 and for
// one larger than 2^62, the largest power of two in an int64. c must be
// valid (see [New]).
func (c Config) RoundSize(size int64) int64 {
	switch {
	case size < 1 || size > maxBlock:
		return 0
	case size <= c.MinBlock:
		return c.MinBlock
	}
	return 1 << bits.Len64(uint64(size-1))
}

// validate reports the first parameter of c out of range.
func (c Config) validate() error {
	switch {
	case !isPow2(c.MinBlock):
		return param.Error(name, "min_block", c.MinBlock, "must be a power of two")
	case !isPow2(c.Arena):
		return param.Error(name, "arena", c.Arena, "must be a power of two")
	case c.Arena < c.MinBlock:
		return param.Error(name, "arena", c.Arena, fmt.Sprintf("must be at least min_block (%d)", c.MinBlock))
	}
	return nil
}

func isPow2(n int64) bool { return n > 0 && n&(n-1) == 0 }
