package pytorch

import (
	"fmt"
	"strconv"
	"strings"
)

// A Version is a release of PyTorch, by its major and minor numbers: the
// allocator of that release is modelled. The zero Version stands for the
// newest, [Newest].
//
// The rules that differ between the releases modelled, each with the pull
// request of pytorch/pytorch that changed it (c10/cuda/CUDACachingAllocator.cpp
// and c10/cuda/CUDAAllocatorConfig.cpp, later c10/core/AllocatorConfig.cpp):
//
//   - expandable_segments exists from 2.1 (#96995, ExpandableSegment);
//     PyTorch 2.0's parser rejects the key, as every release rejects a key
//     it does not know;
//   - max_non_split_rounding_mb exists from 2.6 (#136174, which made
//     configurable the 20 MiB, kLargeBuffer, by which a request of at
//     least max_split_size may be rounded up to a cached block); before,
//     the rounding is always 20 MiB and the key is rejected;
//   - PYTORCH_ALLOC_CONF sets the CUDA allocator's settings from 2.10
//     only (pytorch/pytorch#165135; 2.9 reads it for other purposes but
//     its CUDA allocator does not, issue #183387), and
//     PYTORCH_CUDA_ALLOC_CONF wins over it (see [EnvConf]);
//   - max_split_size_mb of 20 is accepted from 2.10 only: before,
//     CUDAAllocatorConfig::parseMaxSplitSize (c10/cuda/CUDAAllocatorConfig.cpp)
//     wants more than 20 MiB; from 2.10 the CUDA allocator takes it from
//     AllocatorConfig::parseMaxSplitSize (c10/core/AllocatorConfig.cpp,
//     #165135), which wants at least 20;
//   - roundup_power2_divisions takes the per-interval list
//     "[256:1,512:2,>:8]" in every release modelled (#87290, merged for
//     2.0; one number before it, #74213);
//   - out of memory with expandable segments and a max split size, a
//     release before 2.5 stops with an internal assert
//     ([ErrInternalAssert]) where release_available_cached_blocks reaches
//     a free block of an expandable segment (release_block asserts that
//     the block is of none); from 2.5 it passes over such blocks
//     (#134338), and so does garbage_collect_cached_blocks;
//   - expandable segments serve private pools (a CUDA graph's, a
//     torch.cuda.MemPool's) from 2.5 (#128068, June 2024, after the 2.4
//     branch): before, alloc_block gives a private pool a cudaMalloc
//     segment even with expandable_segments on (the
//     "!p.pool->owner_PrivatePool" test). Since, a MemPool with its own
//     allocator still gets none (#148378 refused MemPool with expandable
//     segments, later narrowed to such pools; not modelled: a snapshot does
//     not record a pool's allocator).
//
// The rest of the out-of-memory path is the same in every release
// modelled (DeviceCachingAllocator::malloc): garbage collection
// (garbage_collection_threshold, #74261, which acts only under a memory
// fraction, as issue #106660 notes); then alloc_block; then
// release_available_cached_blocks, which frees one cached oversize block
// of the request's pool and stream of at least the request (and of
// max_split_size), else the largest oversize blocks until that much is
// freed, and retries; then, unless a capture is under way,
// release_cached_blocks, which frees every cached whole segment of the
// default pools and of released private pools and unmaps the free pages
// of their expandable segments, and retries once more (#19222). Live
// private pools keep their cached segments: neither empty_cache nor the
// out-of-memory path frees them, and garbage collection looks at the
// default large pool alone. Best fit, splitting and segment sizes are the
// same in every release too.
//
// Not modelled: stream reuse under graph capture (#158352, the
// graph_capture_record_stream_reuse setting, 2.9, off by default), which
// lets a block freed during capture with uses recorded on other streams
// be reused before the capture ends: a snapshot's trace records the
// free_completed of such a block where it happened, and the replay frees
// it there, whatever the release. MemPool's use_on_oom (a default pool
// short of memory served from a private pool's free blocks), which a
// snapshot does not record either.
type Version struct{ Major, Minor int }

// versions are the releases modelled, oldest first.
var versions = func() []Version {
	var v []Version
	for minor := 0; minor <= 11; minor++ {
		v = append(v, Version{2, minor})
	}
	return v
}()

// Newest returns the newest release modelled.
func Newest() Version { return versions[len(versions)-1] }

// Versions returns the releases modelled, oldest first.
func Versions() []Version { return append([]Version(nil), versions...) }

func (v Version) String() string {
	v = v.resolve()
	return strconv.Itoa(v.Major) + "." + strconv.Itoa(v.Minor)
}

// resolve returns v, or Newest for the zero Version.
func (v Version) resolve() Version {
	if v == (Version{}) {
		return Newest()
	}
	return v
}

// atLeast reports whether v is release major.minor or newer.
func (v Version) atLeast(major, minor int) bool {
	v = v.resolve()
	return v.Major > major || v.Major == major && v.Minor >= minor
}

// ParseVersion reads a release as "2.5" (a patch number, "2.9.1", is
// accepted and dropped: the rules modelled change only between minor
// releases). An unknown release is an error that lists those known.
func ParseVersion(s string) (Version, error) {
	parts := strings.Split(strings.TrimSpace(s), ".")
	if len(parts) == 2 || len(parts) == 3 {
		ma, err1 := strconv.Atoi(parts[0])
		mi, err2 := strconv.Atoi(parts[1])
		if err1 == nil && err2 == nil {
			for _, v := range versions {
				if v == (Version{ma, mi}) {
					return v, nil
				}
			}
		}
	}
	known := make([]string, len(versions))
	for i, v := range versions {
		known[i] = v.String()
	}
	return Version{}, fmt.Errorf("unknown PyTorch release (known: %s)", strings.Join(known, ", "))
}

// checkVersion reports the first setting of c that its release does not
// have, as that release's parser would reject it.
func (c Config) checkVersion() error {
	v := c.Version.resolve()
	switch {
	case c.ExpandableSegments && !v.atLeast(2, 1):
		return fmt.Errorf("expandable_segments: not in PyTorch %s (it came in 2.1, pytorch/pytorch#96995)", v)
	case c.MaxNonSplitRounding != largeBuffer && !v.atLeast(2, 6):
		return fmt.Errorf("max_non_split_rounding_mb: not in PyTorch %s (it came in 2.6, pytorch/pytorch#136174; before, the rounding is 20 MiB)", v)
	case c.MaxSplitSize == largeBuffer && !v.atLeast(2, 10):
		return fmt.Errorf("max_split_size_mb: PyTorch %s takes more than 20 (20 is accepted from 2.10, pytorch/pytorch#165135)", v)
	}
	return nil
}
