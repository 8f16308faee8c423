package snapshot

// The schema of a snapshot as the decoder reads it: the role of each
// container, told by its place (the key and the container it goes into),
// the keys that each role of dict keeps, and the containers that the
// model skips. The decoder's containers (build.go) take their roles from
// here, and the model (model.go, fields.go) reads the fields kept.

// A role is what a container is in a snapshot, told by its place.
type role uint8

const (
	rGeneric  role = iota // anything else: kept as it is
	rTop                  // the snapshot's dict
	rLegacy               // a bare list of segments
	rSegments             // "segments"
	rSegment              // one of its dicts
	rBlocks               // a segment's "blocks"
	rBlock                // one of their dicts
	rTraces               // "device_traces"
	rTrace                // one device's list
	rEntry                // one of its dicts
	rStack                // a "frames" list
	rFrame                // one of its dicts
)

// childRole returns the role of a container of type t at key (noKey for a
// list's item) of a container of role parent.
func childRole(parent role, key fieldKey, t ctype) role {
	switch {
	case parent == rTop && key == keySegments && t == ctList:
		return rSegments
	case parent == rTop && key == keyDeviceTraces && t == ctList:
		return rTraces
	case (parent == rSegments || parent == rLegacy) && t == ctDict:
		return rSegment
	case parent == rSegment && key == keyBlocks && t == ctList:
		return rBlocks
	case parent == rBlocks && t == ctDict:
		return rBlock
	case parent == rTraces && t == ctList:
		return rTrace
	case parent == rTrace && t == ctDict:
		return rEntry
	case (parent == rEntry || parent == rBlock || parent == rSegment) && key == keyFrames && t == ctList:
		return rStack
	case parent == rStack && t == ctDict:
		return rFrame
	}
	return rGeneric
}

// itemType returns the type of the items of a list of role r, for telling
// an item of a list just created from the next item of the list it goes
// into; a generic list takes anything.
func itemType(r role) (ctype, bool) {
	switch r {
	case rLegacy, rSegments, rBlocks, rTrace, rStack:
		return ctDict, true
	case rTraces:
		return ctList, true
	}
	return 0, false
}

// A fieldKey is a key that the package models.
type fieldKey uint8

const (
	keyAction fieldKey = iota
	keyAddr
	keyDeviceFree
	keySize
	keyStream
	keyTimeUS
	keyCategory
	keyFrames
	keyDevice
	keyAddress
	keyTotalSize
	keyAllocatedSize
	keyActiveSize
	keyRequestedSize
	keySegmentType
	keySegmentPoolID
	keyIsExpandable
	keyBlocks
	keyState
	keyFilename
	keyLine
	keyName
	keySegments
	keyDeviceTraces
	keyAllocatorSettings
	nKeys
	noKey fieldKey = 0xff
)

var keyNames = [nKeys]string{"action", "addr", "device_free", "size", "stream", "time_us", "category", "frames",
	"device", "address", "total_size", "allocated_size", "active_size", "requested_size", "segment_type",
	"segment_pool_id", "is_expandable", "blocks", "state", "filename", "line", "name", "segments", "device_traces",
	"allocator_settings"}

func keyNamed(s string) fieldKey {
	for i, n := range keyNames {
		if n == s {
			return fieldKey(i)
		}
	}
	return noKey
}

func bits(keys ...fieldKey) uint32 {
	var b uint32
	for _, k := range keys {
		b |= 1 << k
	}
	return b
}

// roleKeys are the keys that each dict role keeps.
var roleKeys = [...]uint32{
	rTop:     bits(keySegments, keyDeviceTraces, keyAllocatorSettings),
	rSegment: bits(keyDevice, keyAddress, keyTotalSize, keyAllocatedSize, keyActiveSize, keyRequestedSize, keyStream, keySegmentType, keySegmentPoolID, keyIsExpandable, keyBlocks, keyFrames),
	rBlock:   bits(keyAddress, keySize, keyRequestedSize, keyState, keyCategory, keyFrames),
	rEntry:   bits(keyAction, keyAddr, keyDeviceFree, keySize, keyStream, keyTimeUS, keyCategory, keyFrames),
	rFrame:   bits(keyFilename, keyLine, keyName),
}

// fields are the modelled keys of a dict being built.
type fields struct {
	has uint32
	v   [nKeys]val
}

// get returns the value at k, false when absent or None.
func (f *fields) get(k fieldKey) (val, bool) {
	if f.has&(1<<k) == 0 || f.v[k].K == kNone {
		return val{}, false
	}
	return f.v[k], true
}

func (f *fields) present(k fieldKey) bool { return f.has&(1<<k) != 0 }

// skipChild reports whether a container at key of a dict of role parent
// is skipped: a dict of the model whose key is not one it reads, or is a
// scalar field, which a container never is. A skipped container, and all
// it holds, is never built: it is a kSkip on the stack and in the memo,
// which only says its type, and what goes into it is dropped, so that a
// value of any size under such a key costs no more than its memo entries
// (see the package doc). A memo reference that puts one where the model
// reads it is refused (skippedHere).
func skipChild(parent role, key fieldKey) bool {
	switch parent {
	case rTop, rSegment, rBlock, rEntry, rFrame:
		return key == noKey || roleKeys[parent]&(1<<key) == 0 || !holdsContainer[key]
	}
	return false
}

// holdsContainer are the keys of the model whose values are containers.
var holdsContainer = [nKeys]bool{keySegments: true, keyDeviceTraces: true, keyAllocatorSettings: true,
	keyBlocks: true, keyFrames: true, keySegmentPoolID: true}

// scalarKeys are the keys of each role's dict that hold no container:
// roleKeys without those of holdsContainer; none for rGeneric.
var scalarKeys = func() (s [len(roleKeys)]uint32) {
	for r, keys := range roleKeys {
		for k, holds := range holdsContainer {
			if !holds {
				s[r] |= keys & (1 << k)
			}
		}
	}
	return s
}()
