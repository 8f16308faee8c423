package traces

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDeviceMemoryComments: the device_memory comments that a Writer
// writes read back as the trace's device capacities; a malformed one is an
// error naming its line.
func TestDeviceMemoryComments(t *testing.T) {
	var b bytes.Buffer
	w := NewWriter(&b, ColOp, ColID, ColSize, ColDevice)
	require.NoError(t, w.DeviceMemory(1, 5<<30))
	require.NoError(t, w.Comment("a note"))
	require.NoError(t, w.Write(Event{Op: OpAlloc, ID: 7, Size: 100, Device: 1}))
	require.NoError(t, w.Flush())
	r, err := NewReader(bytes.NewReader(b.Bytes()), "t.csv", Options{})
	require.NoError(t, err)
	dc, ok := r.(interface{ DeviceCapacity(int) int64 })
	require.True(t, ok)
	assert.Equal(t, int64(5<<30), dc.DeviceCapacity(1))
	assert.Zero(t, dc.DeviceCapacity(0))
	assert.Zero(t, dc.DeviceCapacity(-1))
	for r.Scan() {
	}
	require.NoError(t, r.Err())

	for _, bad := range []string{"# device_memory 0", "# device_memory x 5", "# device_memory 0 -5", "# device_memory 99999999 5"} {
		_, err := NewReader(strings.NewReader(bad+"\nop,id,size\nalloc,1,5\n"), "t.csv", Options{})
		require.Error(t, err, bad)
		assert.Contains(t, err.Error(), "t.csv:1: bad device_memory comment", bad)
	}
}

// FuzzDeviceMemoryLine: any comment line parses without a panic, and a
// device_memory line that parses writes back the same.
func FuzzDeviceMemoryLine(f *testing.F) {
	for _, s := range []string{"# device_memory 0 85899345920", "#device_memory 3 1", "# device_memory", "# other", "# device_memory 1 2 3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		d, n, ok, err := deviceMemoryLine([]byte(line))
		if !ok || err != nil {
			return
		}
		var b bytes.Buffer
		w := NewWriter(&b)
		require.NoError(t, w.DeviceMemory(d, n))
		require.NoError(t, w.Flush())
		got := strings.Split(b.String(), "\n")[1]
		d2, n2, ok2, err2 := deviceMemoryLine([]byte(got))
		require.NoError(t, err2)
		assert.True(t, ok2)
		assert.Equal(t, d, d2)
		assert.Equal(t, n, n2)
	})
}
