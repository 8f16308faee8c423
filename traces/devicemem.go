package traces

import (
	"bytes"
	"fmt"
	"strconv"
)

// Device memory in the native format.
//
// A trace may know the memory of the devices it was recorded on: a PyTorch
// snapshot that records an out-of-memory error tells it (see the snapshot
// reader's DeviceCapacity), and a replay with no capacity of its own takes
// it. So that a trace converted to the native format replays on the same
// devices, the native format records it in comment lines before its
// header, one per device:
//
//	# device_memory DEVICE BYTES
//
// which its reader reports as the snapshot's reader does (DeviceCapacity,
// DeviceMemory). Other readers of the format read them as comments.

// deviceMemoryTag starts the comment that records a device's memory.
const deviceMemoryTag = "device_memory"

// DeviceMemory writes the comment that records that device dev has bytes
// of memory; write it before the first event.
func (w *Writer) DeviceMemory(dev int, bytes int64) error {
	return w.Comment(deviceMemoryTag + " " + strconv.Itoa(dev) + " " + strconv.FormatInt(bytes, 10))
}

// deviceMemoryLine parses a comment line ("# ..."): ok is false for a
// comment that is not a device_memory line, and err says what is wrong
// with one that is.
func deviceMemoryLine(line []byte) (dev int, n int64, ok bool, err error) {
	f := bytes.Fields(bytes.TrimPrefix(line, []byte("#")))
	if len(f) == 0 || string(f[0]) != deviceMemoryTag {
		return 0, 0, false, nil
	}
	if len(f) == 3 {
		d, derr := strconv.Atoi(string(f[1]))
		b, berr := strconv.ParseInt(string(f[2]), 10, 64)
		if derr == nil && berr == nil && d >= 0 && d <= maxDeviceIndex && b > 0 {
			return d, b, true, nil
		}
	}
	return 0, 0, true, fmt.Errorf("bad %s comment %q: want \"# %s DEVICE BYTES\", DEVICE from 0 to %d, BYTES positive",
		deviceMemoryTag, line, deviceMemoryTag, maxDeviceIndex)
}

// maxDeviceIndex is the highest device index a device_memory comment may
// name, that of the virtual devices.
const maxDeviceIndex = 1<<16 - 1

// setDeviceMemory notes the memory of device dev.
func setDeviceMemory(mem *[]int64, dev int, n int64) {
	for len(*mem) <= dev {
		*mem = append(*mem, 0)
	}
	(*mem)[dev] = n
}

// DeviceCapacity returns the memory of device dev that the trace records
// (see device_memory above), or 0: the reader is a sim.CapacityReporter.
func (r *csvReader) DeviceCapacity(dev int) int64 {
	if dev < 0 || dev >= len(r.memory) {
		return 0
	}
	return r.memory[dev]
}

// DeviceMemory returns the memory of each device that the trace records,
// by device index, 0 where it records none.
func (r *csvReader) DeviceMemory() []int64 { return append([]int64(nil), r.memory...) }

// DeviceMemory returns the memory of each device that the snapshot tells
// (see DeviceCapacity), by device index, 0 where it does not.
func (r *snapshotReader) DeviceMemory() []int64 { return append([]int64(nil), r.memory...) }
