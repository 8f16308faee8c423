package snapshot

import (
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"

	"github.com/gpualloc/gpualloc/internal/torchsize"
)

// Intervals is the number of intervals of roundup_power2_divisions: [1, 2)
// MiB (with the smaller sizes), [2, 4) MiB, ..., [32, 64) GiB (with the
// larger sizes).
const Intervals = torchsize.Intervals

// NoMaxSplitSize is the MaxSplitSize of an allocator that splits blocks of
// any size.
const NoMaxSplitSize int64 = -1

// AllocatorSettings are the settings of the allocator that took a snapshot
// ("allocator_settings").
type AllocatorSettings struct {
	// Conf is the PYTORCH_CUDA_ALLOC_CONF string that the allocator last
	// parsed, "" when none (key "PYTORCH_CUDA_ALLOC_CONF", or
	// "PYTORCH_ALLOC_CONF").
	Conf string
	// Effective reports whether the file records the effective settings
	// below, as PyTorch does since version 2.1; when it is false, they are
	// the defaults and only Conf tells the settings.
	Effective bool
	// MaxSplitSize is max_split_size in bytes, or NoMaxSplitSize (PyTorch
	// records -1 or the largest size_t).
	MaxSplitSize int64
	// RoundupPower2Divisions are the divisions of each interval, 0 for
	// none (a dict from the interval's first MiB, "1" to "32768", to its
	// divisions; or, in older files, one integer for all).
	RoundupPower2Divisions [Intervals]int64
	// GarbageCollectionThreshold is garbage_collection_threshold, 0 for
	// off.
	GarbageCollectionThreshold float64
	// ExpandableSegments is expandable_segments.
	ExpandableSegments bool
	// Other holds the keys not modelled above (pinned-memory options,
	// release_lock_on_cudamalloc, ...), with dicts as map[string]any, lists
	// and tuples as []any, integers as int64 (or *big.Int when they do not
	// fit), None as nil.
	Other map[string]any
}

// DefaultSettings returns the settings of an allocator configured with
// nothing: PyTorch's defaults.
func DefaultSettings() AllocatorSettings {
	return AllocatorSettings{MaxSplitSize: NoMaxSplitSize}
}

func (p *parser) settings(v any, path string) *AllocatorSettings {
	m := p.dict(v, path)
	if m == nil {
		return nil
	}
	s := DefaultSettings()
	for k, v := range m {
		key, ok := k.(string)
		if !ok {
			p.fail(path, "a key is not a string but "+pyType(k))
			return nil
		}
		kp := path + "." + key
		switch key {
		case "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF":
			if !isNone(v) {
				s.Conf = p.str(m, key, path)
			}
		case "max_split_size":
			s.Effective = true
			if x, ok := v.(*big.Int); ok && !x.IsInt64() {
				if x.Sign() < 0 || x.BitLen() > 64 {
					p.fail(kp, "out of range: "+x.String())
				}
				break // the largest size_t: no limit
			}
			if n := p.int(m, key, path, NoMaxSplitSize); n >= 0 {
				s.MaxSplitSize = n
			}
		case "roundup_power2_divisions":
			s.Effective = true
			s.RoundupPower2Divisions = p.divisions(v, kp)
		case "garbage_collection_threshold":
			s.Effective = true
			switch x := v.(type) {
			case float64:
				s.GarbageCollectionThreshold = x
			case *big.Int:
				s.GarbageCollectionThreshold, _ = new(big.Float).SetInt(x).Float64()
			default:
				n, ok := toInt64(v)
				if !ok {
					p.fail(kp, "not a number but "+pyType(v))
				}
				s.GarbageCollectionThreshold = float64(n)
			}
			if f := s.GarbageCollectionThreshold; f < 0 || f >= 1 || math.IsNaN(f) {
				p.fail(kp, "out of range: "+strconv.FormatFloat(f, 'g', -1, 64))
			}
		case "expandable_segments":
			s.Effective = true
			n, ok := toInt64(v)
			if !ok {
				p.fail(kp, "not a bool but "+pyType(v))
			}
			s.ExpandableSegments = n != 0
		default:
			if tooLarge(v) {
				p.fail(kp, "nested too deeply, too large, or holding itself")
				return nil
			}
			if s.Other == nil {
				s.Other = map[string]any{}
			}
			s.Other[key] = plain(v)
		}
	}
	return &s
}

// divisions reads roundup_power2_divisions: one integer, or a dict from the
// first MiB of an interval to its divisions.
func (p *parser) divisions(v any, path string) [Intervals]int64 {
	var d [Intervals]int64
	if x, ok := v.(*big.Int); ok && !x.IsInt64() {
		p.fail(path, "out of range: "+x.String())
		return d
	}
	if n, ok := toInt64(v); ok {
		if n < 0 {
			p.fail(path, "negative: "+strconv.FormatInt(n, 10))
		}
		for i := range d {
			d[i] = n
		}
		return d
	}
	m := p.dict(v, path)
	for k, v := range m {
		ks, _ := toString(k)
		mb, err := strconv.ParseUint(ks, 10, 64)
		if err != nil || mb == 0 || mb&(mb-1) != 0 {
			p.fail(path, fmt.Sprintf("interval %v: not a power of two of MiB", plain(k)))
			return d
		}
		n, ok := toInt64(v)
		if !ok || n < 0 {
			p.fail(path+"["+ks+"]", "not a number of divisions: "+fmt.Sprint(plain(v)))
			return d
		}
		d[torchsize.MiBInterval(mb)] = n
	}
	return d
}

// DeviceMemoryKey is the key of Other under which a snapshot written by a
// replay (simulate --snapshot) records the memory of each device, a list
// indexed by device; PyTorch's own snapshots do not record it.
const DeviceMemoryKey = "device_memory"

// DeviceMemory returns the memory of device dev that the settings record
// (Other["device_memory"]), or 0.
func (s *AllocatorSettings) DeviceMemory(dev int) int64 {
	if s == nil {
		return 0
	}
	mem, _ := s.Other[DeviceMemoryKey].([]any)
	if dev < 0 || dev >= len(mem) {
		return 0
	}
	n, _ := mem[dev].(int64)
	return max(n, 0)
}

// StrategyKey is the key of Other under which a snapshot written by a
// replay (simulate --snapshot) records the spec of the strategy replayed;
// PyTorch's own snapshots do not have it.
const StrategyKey = "strategy"

// Strategy returns the name of the strategy whose replay wrote the
// snapshot (Other["strategy"], "bestfit" of "bestfit:round=512"), and
// false for a snapshot that records none, as PyTorch's own do.
func (s *AllocatorSettings) Strategy() (string, bool) {
	if s == nil {
		return "", false
	}
	spec, ok := s.Other[StrategyKey].(string)
	if !ok || spec == "" {
		return "", false
	}
	name, _, _ := strings.Cut(spec, ":")
	return name, true
}

// MemoryFraction returns the per-process memory fraction that Conf sets
// (memory_fraction, the pytorch strategy's extension, which a replay's
// snapshot writes; PyTorch's own snapshots do not record it), the last
// one as the strategy reads its conf, or 0.
func (s *AllocatorSettings) MemoryFraction() float64 {
	if s == nil {
		return 0
	}
	v, _ := ConfValue(s.Conf, "memory_fraction")
	if f, err := strconv.ParseFloat(v, 64); err == nil && f > 0 && f <= 1 {
		return f
	}
	return 0
}

// AllocConf returns the settings that decide where blocks go, in
// PYTORCH_CUDA_ALLOC_CONF syntax, for the pytorch strategy: max_split_size_mb,
// roundup_power2_divisions (one number when every interval has the same,
// else a list "[1:4,2:8]"), garbage_collection_threshold and
// expandable_segments:True, each only when it is not the default; and
// max_non_split_rounding_mb, and memory_fraction, version and device
// (the pytorch strategy's extensions, which a replay's snapshot records)
// from Conf, since PyTorch does not record their effective values. When the file records no effective settings, every one
// of these options comes from Conf. Default settings give "".
func (s *AllocatorSettings) AllocConf() string {
	if s == nil {
		return ""
	}
	fromConf := map[string]bool{"max_non_split_rounding_mb": true, "memory_fraction": true, "version": true, "device": true}
	var opts []string
	if s.Effective {
		if s.MaxSplitSize >= 0 && s.MaxSplitSize < math.MaxInt64 {
			opts = append(opts, "max_split_size_mb:"+strconv.FormatInt(s.MaxSplitSize>>20, 10))
		}
		if d := FormatDivisions(s.RoundupPower2Divisions); d != "0" {
			opts = append(opts, "roundup_power2_divisions:"+d)
		}
		if s.GarbageCollectionThreshold > 0 {
			opts = append(opts, "garbage_collection_threshold:"+strconv.FormatFloat(s.GarbageCollectionThreshold, 'g', -1, 64))
		}
		if s.ExpandableSegments {
			opts = append(opts, "expandable_segments:True")
		}
	} else {
		for _, k := range []string{"max_split_size_mb", "roundup_power2_divisions", "garbage_collection_threshold", "expandable_segments"} {
			fromConf[k] = true
		}
	}
	for _, o := range SplitConf(s.Conf) {
		k, _, _ := strings.Cut(o, ":")
		if fromConf[strings.TrimSpace(k)] {
			opts = append(opts, strings.TrimSpace(o))
		}
	}
	return strings.Join(opts, ",")
}

// Conf returns the settings of the allocator that took the snapshot, in
// PYTORCH_CUDA_ALLOC_CONF syntax: those of its allocator_settings
// ([AllocatorSettings.AllocConf]), with expandable_segments:True when its
// segments or trace show expandable segments and the settings do not say
// so (files from before PyTorch recorded the setting), and device:npu for
// a snapshot that torch_npu wrote ([Snapshot.TorchNPU]). Where a device's
// segments show expandable segments off while another's show them on, as
// torch_npu's settings per device may, that device's setting follows as
// "deviceN.expandable_segments:False", which the pytorch strategy applies
// to device N alone. PyTorch's defaults give "".
func (s *Snapshot) Conf() string {
	conf := s.AllocatorSettings.AllocConf()
	inferred := s.inferExpandable()
	if inferred {
		conf = joinConf(conf, "expandable_segments:True")
		for _, d := range s.Devices() {
			if on, shown := s.deviceExpandable(d); shown && !on {
				conf = joinConf(conf, "device"+strconv.Itoa(d)+".expandable_segments:False")
			}
		}
	}
	if s.TorchNPU() {
		conf = joinConf(conf, "device:npu")
	}
	return conf
}

// NewestPyTorch is the newest release of PyTorch whose snapshots the
// module knows.
const NewestPyTorch = "2.11"

// Release says what recorded the snapshot, and why it is known: the
// release of PyTorch that PyTorchVersion infers ("2.8"), or "torch_npu" for
// a snapshot that torch_npu wrote (see TorchNPU). It costs what both do.
func (s *Snapshot) Release() (release, why string) {
	if s.TorchNPU() {
		return "torch_npu", "its live blocks hold their requests plus 32 bytes, as torch_npu rounds them, and it records no allocator_settings"
	}
	return s.pytorchRelease()
}

// PyTorchVersion infers the release of PyTorch that wrote the snapshot,
// as "2.8", and says why: the newest release that writes what the file
// holds, from what each release added to snapshots. [Snapshot.Conf] does
// not name it; a replay by the pytorch strategy of version auto follows
// it (see traces.Start.Release).
//
//   - allocator_settings with graph_capture_record_stream_reuse, which
//     PyTorch records from 2.9 (pytorch/pytorch#158352): the newest
//     release;
//   - allocator_settings without it (PyTorch records allocator_settings
//     from 2.3, pytorch/pytorch#119404): 2.8;
//   - no allocator_settings and entries without time_us (recorded from
//     about 2.2): 2.1;
//   - no allocator_settings otherwise (entries with time_us, or none):
//     2.2.
//
// A snapshot that torch_npu wrote ([Snapshot.TorchNPU]) has releases of
// its own: "" and a reason. The cost is TorchNPU's, and a look at the
// settings and at the first entry of each trace.
func (s *Snapshot) PyTorchVersion() (version, why string) {
	if s.TorchNPU() {
		return "", "written by torch_npu, whose releases are its own"
	}
	return s.pytorchRelease()
}

// pytorchRelease is PyTorchVersion of a snapshot that torch_npu did not
// write.
func (s *Snapshot) pytorchRelease() (version, why string) {
	if a := s.AllocatorSettings; a != nil {
		if _, ok := a.Other["graph_capture_record_stream_reuse"]; ok {
			return NewestPyTorch, "allocator_settings has graph_capture_record_stream_reuse, which PyTorch records from 2.9 (pytorch/pytorch#158352): the newest release"
		}
		return "2.8", "allocator_settings (recorded from 2.3, pytorch/pytorch#119404) without graph_capture_record_stream_reuse (recorded from 2.9): the last release before 2.9"
	}
	for d := range s.NumTraces() {
		if t := s.Trace(d); t.Len() > 0 {
			if t.At(0).TimeUS == NoTime {
				return "2.1", "no allocator_settings (recorded from 2.3) and entries without time_us (recorded from about 2.2)"
			}
			break
		}
	}
	return "2.2", "no allocator_settings, which PyTorch records from 2.3 (pytorch/pytorch#119404): the last release before 2.3"
}

// DeviceConf returns [Snapshot.Conf] for device dev alone: with its own
// expandable_segments where its segments show them, and no deviceN items.
func (s *Snapshot) DeviceConf(dev int) string {
	conf := s.AllocatorSettings.AllocConf()
	if s.inferExpandable() {
		if on, shown := s.deviceExpandable(dev); on || !shown {
			conf = joinConf(conf, "expandable_segments:True")
		}
	}
	if s.TorchNPU() {
		conf = joinConf(conf, "device:npu")
	}
	return conf
}

// DeviceRules returns the rules of the allocator that recorded device dev
// ([AllocatorSettings.Rules]), with expandable segments where
// [Snapshot.DeviceConf] says so and torch_npu's 32 bytes added to each
// request ([Rules.Pad]) for a snapshot that torch_npu wrote.
func (s *Snapshot) DeviceRules(dev int) (Rules, error) {
	r, err := s.AllocatorSettings.Rules()
	if err != nil {
		return r, err
	}
	if s.inferExpandable() {
		on, shown := s.deviceExpandable(dev)
		r.Expandable = on || !shown
	}
	if s.TorchNPU() {
		r.Pad = NPUPad
	}
	return r, nil
}

func joinConf(conf, item string) string { return strings.TrimPrefix(conf+","+item, ",") }

// inferExpandable reports whether the settings leave expandable segments
// to what the snapshot shows, and it shows some.
func (s *Snapshot) inferExpandable() bool {
	r, err := s.AllocatorSettings.Rules()
	return (err != nil || !r.Expandable) && s.expandable()
}

// expandable reports whether the snapshot shows expandable segments.
func (s *Snapshot) expandable() bool {
	for _, sg := range s.Segments {
		if sg.IsExpandable {
			return true
		}
	}
	for d := range s.NumTraces() {
		if t := s.Trace(d); t.Has(SegmentMap) || t.Has(SegmentUnmap) {
			return true
		}
	}
	return false
}

// deviceExpandable reports whether device dev's segments and trace show
// expandable segments (on), and whether they show anything (shown): a
// segment, or a segment entry in the trace. An expandable segment, or a
// segment_map or segment_unmap, shows them on, whatever else the device
// shows (segments allocated before they were turned on stay); segments
// that are not expandable, segment_alloc and segment_free, and nothing
// else, show them off.
func (s *Snapshot) deviceExpandable(dev int) (on, shown bool) {
	for _, sg := range s.Segments {
		if sg.Device == dev && !sg.Pool.Private() {
			if sg.IsExpandable {
				return true, true
			}
			shown = true
		}
	}
	if dev >= s.NumTraces() {
		return false, shown
	}
	t := s.Trace(dev)
	if t.Has(SegmentMap) || t.Has(SegmentUnmap) {
		return true, true
	}
	return false, shown || t.Has(SegmentAlloc) || t.Has(SegmentFree)
}

// NPUPad is the bytes torch_npu adds to every request before rounding it
// (AddPadSize, which round_size calls, in
// torch_npu/csrc/core/npu/NPUCachingAllocator.cpp of Ascend/pytorch).
const NPUPad = 32

// TorchNPU reports whether torch_npu, the PyTorch backend of Ascend NPUs,
// wrote the snapshot. The signal is the size of the live blocks: torch_npu
// adds 32 bytes to every request before rounding it to 512 (NPUPad),
// where PyTorch's CUDA allocator rounds the request itself (round_size in
// c10/cuda/CUDACachingAllocator.cpp). Of the live blocks whose request
// tells the two apart (those whose request and request + 32 round to
// different multiples of 512), more must have the size of the padded
// request than that of the request; blocks of neither size (a block not
// split, rounded by roundup_power2_divisions) do not count. A file with
// allocator_settings is PyTorch's: torch_npu's memory_snapshot.cpp writes
// only segments and device_traces. A snapshot with no live block that
// tells is PyTorch's. Other marks of torch_npu's files (no time_us,
// streams that are pointers even for the default stream) are not
// relied on: PyTorch before 2.2 writes no time_us either, and its
// non-default streams are pointers too. The cost is one pass over the
// blocks.
func (s *Snapshot) TorchNPU() bool {
	if s.AllocatorSettings != nil {
		return false
	}
	var padded, unpadded int
	for _, sg := range s.Segments {
		for _, b := range sg.Blocks {
			r := b.RequestedSize
			if !b.Live() || r < 1 || r == b.Size || r > math.MaxInt64-NPUPad {
				continue
			}
			switch plain, pad := torchsize.RoundToBlock(r), torchsize.RoundToBlock(r+NPUPad); {
			case plain == pad:
			case b.Size == pad:
				padded++
			case b.Size == plain:
				unpadded++
			}
		}
	}
	return padded > unpadded
}

// FormatDivisions writes roundup_power2_divisions in PYTORCH_CUDA_ALLOC_CONF
// syntax (see [torchsize.FormatDivisions]): one number when every interval
// has the same divisions, else a list of the intervals with divisions,
// "[1:4,2:8,1024:2]".
func FormatDivisions(d [Intervals]int64) string { return torchsize.FormatDivisions(d) }

// ConfValue returns the value of the last setting of conf (in the syntax
// of [SplitConf]) whose key is key, trimmed, and whether there is one:
// ConfValue("device:npu,version:2.8", "version") is "2.8", true.
func ConfValue(conf, key string) (string, bool) {
	value, found := "", false
	for _, item := range SplitConf(conf) {
		if k, v, _ := strings.Cut(item, ":"); strings.TrimSpace(k) == key {
			value, found = strings.TrimSpace(v), true
		}
	}
	return value, found
}

// NPUConf reports whether conf chooses torch_npu's allocator, as
// [Snapshot.Conf] records for a snapshot that torch_npu wrote
// (device:npu).
func NPUConf(conf string) bool {
	v, _ := ConfValue(conf, "device")
	return strings.EqualFold(v, "npu")
}

// SplitConf splits a PYTORCH_CUDA_ALLOC_CONF string into its settings
// ("key:value") at the commas outside brackets, as PyTorch's parser reads
// it (c10/core/AllocatorConfig.cpp): one trailing comma after the last
// setting is allowed and gives no setting, so that "a:1," and "a:1" are the
// same and a blank string has none; any other empty setting ("a:1,,b:2",
// ",a:1") is kept, as "", for the caller to reject as PyTorch does.
// Settings are not trimmed.
func SplitConf(s string) []string {
	var out []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '[':
			depth++
		case ']':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	if strings.TrimSpace(s[start:]) != "" {
		out = append(out, s[start:])
	}
	return out
}
