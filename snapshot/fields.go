package snapshot

import (
	"math"
	"strconv"
)

// Field conversions, with the messages of a field of the wrong type.

func (d *decoder) fieldPath(at itemAt, k fieldKey) string {
	return join(d.pathOf(at), keyNames[k])
}

// The checks of the fields that a replay needs: an integer field holds an
// integer (not a bool, a float or a string) within its range, said in
// the message that refuses it; absent and None are alike, the field's
// default.

// Ranges of the integer fields, and how messages name their upper bound.
const (
	mostSize  = "2^63-1 bytes"        // sizes, as int64
	mostTime  = "2^63-1 microseconds" // time_us, as int64
	mostUint  = "2^64-1"              // addresses and streams, as uint64
	mostInt32 = "2^31-1"              // device indexes, as int
)

// natural returns v as an integer from 0 to most, or the message that
// says why it is not one: "negative: -1", "18446744073709551616 is more
// than 2^63-1 bytes", "not an integer but a string".
func (d *decoder) natural(v val, most uint64, mostText string) (uint64, string) {
	switch v.K {
	case kInt:
		if n := int64(v.X); n < 0 {
			return 0, "negative: " + strconv.FormatInt(n, 10)
		}
		if v.X <= most {
			return v.X, ""
		}
	case kUint:
		if v.X <= most {
			return v.X, ""
		}
	case kBig:
		b := d.Bigs[v.X]
		if b.Sign() < 0 {
			return 0, "negative: " + b.String()
		}
		if b.IsUint64() && b.Uint64() <= most {
			return b.Uint64(), ""
		}
	default:
		return 0, "not an integer but " + d.typeName(v)
	}
	return 0, d.intText(v) + " is more than " + mostText
}

// intText returns an integer value in decimal.
func (d *decoder) intText(v val) string {
	switch v.K {
	case kUint:
		return strconv.FormatUint(v.X, 10)
	case kBig:
		return d.Bigs[v.X].String()
	}
	return strconv.FormatInt(int64(v.X), 10)
}

// fsize returns the size at k, an integer from 0 to 2^63-1; absent or
// None gives def.
func (d *decoder) fsize(f *fields, k fieldKey, at itemAt, def int64) int64 {
	return d.fint63(f, k, at, def, mostSize)
}

// ftime returns the time_us at k, an integer from 0 to 2^63-1; absent or
// None gives NoTime.
func (d *decoder) ftime(f *fields, k fieldKey, at itemAt) int64 {
	return d.fint63(f, k, at, NoTime, mostTime)
}

// fint63 returns the integer at k, from 0 to 2^63-1; absent or None gives
// def, and a value out of range an error that says most is the most.
func (d *decoder) fint63(f *fields, k fieldKey, at itemAt, def int64, most string) int64 {
	v, ok := f.get(k)
	if !ok {
		return def
	}
	if v.K == kInt && int64(v.X) >= 0 {
		return int64(v.X)
	}
	n, msg := d.natural(v, math.MaxInt64, most)
	if msg != "" {
		d.failAt(d.fieldPath(at, k), msg)
	}
	return int64(n)
}

// fuint returns the address or stream at k, an integer from 0 to 2^64-1;
// absent or None gives 0, or an error when need is set.
func (d *decoder) fuint(f *fields, k fieldKey, at itemAt, need bool) uint64 {
	v, ok := f.get(k)
	if !ok {
		if need {
			d.failAt(d.fieldPath(at, k), "missing")
		}
		return 0
	}
	if v.K == kInt && int64(v.X) >= 0 {
		return v.X
	}
	n, msg := d.natural(v, math.MaxUint64, mostUint)
	if msg != "" {
		d.failAt(d.fieldPath(at, k), msg)
	}
	return n
}

// fdevice returns the device index at k, from 0 to 2^31-1; absent or None
// gives 0.
func (d *decoder) fdevice(f *fields, k fieldKey, at itemAt) int {
	v, ok := f.get(k)
	if !ok {
		return 0
	}
	n, msg := d.natural(v, math.MaxInt32, mostInt32)
	if msg != "" {
		if isInt(v.K) {
			msg = "out of range: " + d.intText(v)
		}
		d.failAt(d.fieldPath(at, k), msg)
	}
	return int(n)
}

func isInt(k kind) bool { return k == kInt || k == kUint || k == kBig }

// fbool returns the flag at k as Python tells its truth: a bool, or an
// integer, true when not 0; absent or None gives false. Other values are
// refused.
func (d *decoder) fbool(f *fields, k fieldKey, at itemAt) bool {
	v, ok := f.get(k)
	if !ok {
		return false
	}
	switch v.K {
	case kBool, kInt, kUint:
		return v.X != 0
	case kBig:
		return d.Bigs[v.X].Sign() != 0
	}
	d.failAt(d.fieldPath(at, k), "not a bool but "+d.typeName(v))
	return false
}

// fstr returns the string at k, "" when absent.
func (d *decoder) fstr(f *fields, k fieldKey, at itemAt) string {
	v, ok := f.get(k)
	if !ok {
		return ""
	}
	if v.K == kStr || v.K == kBytes {
		return d.Strs[v.X]
	}
	d.failAt(d.fieldPath(at, k), "not a string but "+d.typeName(v))
	return ""
}

// The fields that a replay does not need never fail a read: a frame's
// name, filename and line are taken where they are what PyTorch writes,
// and are "" or 0 where they are not.

// anyStr returns the string at k, "" when it is absent or not a string.
func (d *decoder) anyStr(f *fields, k fieldKey) string {
	if v, ok := f.get(k); ok && (v.K == kStr || v.K == kBytes) {
		return d.Strs[v.X]
	}
	return ""
}

// anyLine returns the integer at k: an integer of 64 bits as it is, one
// of 2^63 to 2^64-1 as the negative number whose bits it has (PyTorch
// writes a line of -1 as an unsigned 2^64-1), anything else 0.
func (d *decoder) anyLine(f *fields, k fieldKey) int64 {
	v, ok := f.get(k)
	if !ok {
		return 0
	}
	switch v.K {
	case kInt, kUint:
		return int64(v.X)
	case kBig:
		if b := d.Bigs[v.X]; b.IsInt64() {
			return b.Int64()
		}
	}
	return 0
}

// fstack returns the stack at "frames"; 0 when the read keeps no stacks.
func (d *decoder) fstack(f *fields) StackID {
	if v, ok := f.get(keyFrames); ok && v.K == kStack && !d.noStacks {
		return StackID(v.X)
	}
	return 0
}

// fempty reports whether the stack at "frames" is on the empty-cache
// path.
func (d *decoder) fempty(f *fields) bool {
	if v, ok := f.get(keyFrames); ok && v.K == kStack {
		if d.noStacks {
			return v.X != 0
		}
		return v.X < uint64(len(d.m.stackEC)) && d.m.stackEC[v.X]
	}
	return false
}

// fstrIndex returns the index of the string at k, noStr when absent.
func (d *decoder) fstrIndex(f *fields, k fieldKey, at itemAt) uint32 {
	v, ok := f.get(k)
	if !ok {
		return noStr
	}
	if v.K == kStr || v.K == kBytes {
		return uint32(v.X)
	}
	d.failAt(d.fieldPath(at, k), "not a string but "+d.typeName(v))
	return noStr
}

// addressed reports whether an entry of action a names a block or a
// segment by its "addr", which it then needs.
func addressed(a Action) bool {
	switch a {
	case Alloc, FreeRequested, FreeCompleted, SegmentAlloc, SegmentFree, SegmentMap, SegmentUnmap:
		return true
	}
	return false
}
