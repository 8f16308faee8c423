package pytorch

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/internal/torchsize"
	"github.com/gpualloc/gpualloc/snapshot"
	"github.com/gpualloc/gpualloc/strategy/internal/param"
)

// PyTorch's constants (c10/cuda/CUDACachingAllocator.cpp).
const (
	minBlockSize   = torchsize.MinBlockSize // kMinBlockSize: every block is a multiple of this
	smallSize      = torchsize.SmallSize    // kSmallSize: largest request of the small pool
	smallBuffer    = torchsize.SmallBuffer  // kSmallBuffer: segment of the small pool
	largeBuffer    = torchsize.LargeBuffer  // kLargeBuffer: segment for requests under 10 MiB
	mib            = 1 << 20                // bytes in a MiB
	roundupBands   = torchsize.Intervals    // kRoundUpPowerOfTwoIntervals: bands from 1 MiB to 64 GiB
	unlimitedSplit = math.MaxInt64
)

// Config are the settings of PyTorch's caching allocator, as
// PYTORCH_CUDA_ALLOC_CONF gives them, plus the per-process memory fraction
// (torch.cuda.set_per_process_memory_fraction).
type Config struct {
	// MaxSplitSize, in bytes, is max_split_size_mb: blocks this large or
	// larger are never split, and a request smaller than it is never
	// served from one. math.MaxInt64 (the default) means unlimited;
	// otherwise it must be at least 20 MiB.
	MaxSplitSize int64

	// RoundupPower2Divisions are roundup_power2_divisions for each of the
	// 16 bands [2^i MiB, 2^(i+1) MiB) (band 0 also takes smaller sizes,
	// band 15 larger ones). 0 or 1: round to 512 bytes; d > 1, a power of
	// two: round up to one of d equal steps between powers of two.
	RoundupPower2Divisions [roundupBands]int64

	// GarbageCollectionThreshold is garbage_collection_threshold, 0 (off)
	// or strictly between 0 and 1. It acts only with a MemoryFraction.
	// (PyTorch rejects 0 in its conf; here 0 is accepted as off, so that a
	// full spec reads back.)
	GarbageCollectionThreshold float64

	// ExpandableSegments is expandable_segments: each stream's pool grows
	// one virtual address range in pages (2 MiB small, 20 MiB large)
	// instead of allocating segments; see the package documentation.
	ExpandableSegments bool

	// MaxNonSplitRounding, in bytes, is max_non_split_rounding_mb: a
	// request of at least MaxSplitSize is not served from a free block
	// this much larger than it. Default 20 MiB.
	MaxNonSplitRounding int64

	// MemoryFraction caps reserved memory at MemoryFraction times the
	// device's total memory; 0 (the default) means no cap, else it must be
	// in (0, 1].
	MemoryFraction float64

	// Device is the allocator modelled: PyTorch's for CUDA (the default)
	// or torch_npu's for Ascend NPUs (see [NPU]).
	Device Device

	// Version is the release of PyTorch whose rules apply (see
	// [Version]); the zero Version is the newest.
	Version Version
}

// DefaultConfig returns PyTorch's defaults: no max split size, no power-of-two
// rounding, no garbage collection, no expandable segments, 20 MiB of
// non-split rounding, no memory fraction.
func DefaultConfig() Config {
	return Config{MaxSplitSize: unlimitedSplit, MaxNonSplitRounding: largeBuffer}
}

// RoundSize returns the size of the block PyTorch sets aside for a request
// of size bytes (round_size): 512 bytes at least; with d =
// roundup_power2_divisions of the request's band, if d > 1 and size > 512*d
// the next of d equal steps between the powers of two around size (a power
// of two stays); else a multiple of 512. torch_npu rounds the request plus
// 32 bytes (see [NPU]). It returns 0 for size < 1 or when the result would
// overflow.
func (c Config) RoundSize(size int64) int64 {
	if size < 1 || size > math.MaxInt64-npuPad {
		return torchsize.RoundSize(size, &c.RoundupPower2Divisions)
	}
	return torchsize.RoundSize(size+c.Device.pad(), &c.RoundupPower2Divisions)
}

// segmentSize returns the size of the segment allocated for a block of
// rounded bytes (get_allocation_size), 0 if it would overflow.
func segmentSize(rounded int64) int64 { return torchsize.AllocationSize(rounded) }

// validate reports the first setting out of range as a *gpualloc.ParamError
// wrapped in an error that names the strategy.
func (c Config) validate() error {
	switch {
	case c.MaxSplitSize < largeBuffer:
		return param.Error(name, "max_split_size_mb", fmt.Sprint(c.MaxSplitSize/mib), "must be at least 20")
	case c.GarbageCollectionThreshold < 0 || c.GarbageCollectionThreshold >= 1 || math.IsNaN(c.GarbageCollectionThreshold):
		return param.Error(name, "garbage_collection_threshold", fmt.Sprint(c.GarbageCollectionThreshold), "must be between 0 and 1 (exclusive)")
	case c.MaxNonSplitRounding < 0:
		return param.Error(name, "max_non_split_rounding_mb", fmt.Sprint(c.MaxNonSplitRounding/mib), "must not be negative")
	case c.MemoryFraction < 0 || c.MemoryFraction > 1 || math.IsNaN(c.MemoryFraction):
		return param.Error(name, "memory_fraction", fmt.Sprint(c.MemoryFraction), "must be in (0, 1]")
	}
	for _, d := range c.RoundupPower2Divisions {
		if d != 0 && (d < 0 || d&(d-1) != 0) {
			return param.Error(name, "roundup_power2_divisions", fmt.Sprint(d), "divisions must be powers of two")
		}
	}
	if err := c.checkVersion(); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// ParseConf parses a PYTORCH_CUDA_ALLOC_CONF string, in PyTorch's syntax
// ("max_split_size_mb:128,roundup_power2_divisions:[256:1,512:2,>:8]"),
// starting from [DefaultConfig]. Keys: max_split_size_mb,
// roundup_power2_divisions, garbage_collection_threshold,
// expandable_segments, max_non_split_rounding_mb, and (an extension)
// memory_fraction. Keys PyTorch knows that do not affect where blocks go
// (release_lock_on_cudamalloc, pinned_use_cuda_host_register,
// pinned_num_register_threads, backend:native) are accepted and ignored;
// backend:cudaMallocAsync, which PyTorch serves with CUDA's own
// stream-ordered allocator, is an error. As in
// PyTorch, one trailing comma is allowed but an empty setting is not (see
// [snapshot.SplitConf]). An unknown key or a bad value is a
// *gpualloc.ParamError naming the key.
func ParseConf(conf string) (Config, error) { return ParseConfFor(conf, 0) }

// ParseConfFor is [ParseConf] for the allocator of device dev: an item
// "deviceN.key:value" (an extension, which a snapshot's settings give
// where its devices differ, as torch_npu's may) sets key only when N is
// dev, and is checked all the same otherwise. Such items apply after the
// others, whatever their place.
func ParseConfFor(conf string, dev int) (Config, error) {
	c := DefaultConfig()
	return c, c.apply(conf, dev)
}

// apply sets the keys of a PYTORCH_CUDA_ALLOC_CONF string in c, for the
// allocator of device dev.
func (c *Config) apply(conf string, dev int) error {
	var own [][2]string // this device's items
	for _, item := range snapshot.SplitConf(conf) {
		k, v, ok := strings.Cut(item, ":")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if k == "" && v == "" {
			return fmt.Errorf("%q: an empty setting (a comma with nothing before it)", conf)
		}
		if !ok {
			return &gpualloc.ParamError{Key: k, Msg: "want key:value"}
		}
		d, key, per, err := deviceItem(k)
		if err != nil {
			return err
		}
		if per {
			scratch := DefaultConfig()
			if err := scratch.set(key, v); err != nil {
				return err
			}
			if d == dev {
				own = append(own, [2]string{key, v})
			}
			continue
		}
		if err := c.set(k, v); err != nil {
			return err
		}
	}
	for _, kv := range own {
		if err := c.set(kv[0], kv[1]); err != nil {
			return err
		}
	}
	return nil
}

// confSettings reads a value of the conf parameter, in PyTorch's syntax,
// as its settings (see gpualloc.Param.Settings): the items that
// snapshot.SplitConf splits it into, as PyTorch splits them, each key and
// value trimmed. An item that is no setting (no colon, or empty) has its
// text as key and no value, so that no sweep reaches into it and apply
// rejects it when the allocator opens. "none", the parameter's default,
// has no settings. with writes a setting whose value changed as
// "key:value", and keeps every other item as it was written.
func confSettings(conf string) (settings []gpualloc.KeyValue, with func(values []string) string) {
	if conf == "none" {
		return nil, func([]string) string { return conf }
	}
	items := snapshot.SplitConf(conf)
	settings = make([]gpualloc.KeyValue, len(items))
	for i, item := range items {
		k, v, _ := strings.Cut(item, ":")
		settings[i] = gpualloc.KeyValue{Key: strings.TrimSpace(k), Value: strings.TrimSpace(v)}
	}
	with = func(values []string) string {
		out := make([]string, len(items))
		for i, item := range items {
			out[i] = item
			if values[i] != settings[i].Value {
				out[i] = settings[i].Key + ":" + values[i]
			}
		}
		return strings.Join(out, ",")
	}
	return settings, with
}

// set sets one setting from its PyTorch key and text.
func (c *Config) set(k, v string) error {
	bad := func(msg string) error { return &gpualloc.ParamError{Key: k, Msg: fmt.Sprintf("%q: %s", v, msg)} }
	switch k {
	case "max_split_size_mb":
		if v == "unlimited" || v == "inf" || v == "auto" {
			c.MaxSplitSize = unlimitedSplit
			return nil
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return bad("not an integer")
		}
		if n < largeBuffer/mib {
			return bad("must be at least 20")
		}
		c.MaxSplitSize = unlimitedSplit
		if n < math.MaxInt64/mib {
			c.MaxSplitSize = n * mib
		}
	case "max_non_split_rounding_mb":
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 || n > math.MaxInt64/mib {
			return bad("want a number of MiB")
		}
		c.MaxNonSplitRounding = n * mib
	case "garbage_collection_threshold":
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return bad("not a number")
		}
		if !(f >= 0 && f < 1) {
			return bad("must be between 0 and 1 (exclusive), or 0 for off")
		}
		c.GarbageCollectionThreshold = f
	case "expandable_segments":
		switch strings.ToLower(v) {
		case "true", "1":
			c.ExpandableSegments = true
		case "false", "0":
			c.ExpandableSegments = false
		default:
			return bad("want True or False")
		}
	case "memory_fraction":
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return bad("not a number")
		}
		if !(f >= 0 && f <= 1) {
			return bad("must be in (0, 1], or 0 for no cap")
		}
		c.MemoryFraction = f
	case "roundup_power2_divisions":
		d, err := parseDivisions(v)
		if err != nil {
			return bad(err.Error())
		}
		c.RoundupPower2Divisions = d
	case "backend":
		// PyTorch's c10/cuda/CUDAAllocatorConfig.cpp takes native or
		// cudaMallocAsync; the second replaces the caching allocator
		// with CUDA's stream-ordered one, which is not modelled here.
		if v != "native" {
			return bad("only native, PyTorch's caching allocator, is modelled (cudaMallocAsync hands allocation to the CUDA driver's own pool)")
		}
	case "version":
		ver, err := ParseVersion(v)
		if err != nil {
			return bad(err.Error())
		}
		c.Version = ver
	case "device":
		d, err := parseDevice(v)
		if err != nil {
			return bad(err.Error())
		}
		c.Device = d
	case "release_lock_on_cudamalloc", "pinned_use_cuda_host_register", "pinned_num_register_threads",
		"pinned_use_background_threads", "graph_capture_record_stream_reuse":
	default:
		return &gpualloc.ParamError{Key: k, Msg: "unknown setting (known: max_split_size_mb, roundup_power2_divisions, " +
			"garbage_collection_threshold, expandable_segments, max_non_split_rounding_mb, memory_fraction, device, version)"}
	}
	return nil
}

// parseDivisions parses roundup_power2_divisions (see
// [torchsize.ParseDivisions]).
func parseDivisions(v string) ([roundupBands]int64, error) { return torchsize.ParseDivisions(v) }

// formatDivisions writes d as [snapshot.FormatDivisions] does, without
// brackets and with ";" between entries so that it fits in a spec;
// parseDivisions reads it back.
func formatDivisions(d [roundupBands]int64) string {
	return strings.ReplaceAll(strings.Trim(snapshot.FormatDivisions(d), "[]"), ",", ";")
}
