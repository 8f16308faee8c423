package traces_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc/traces"
)

// TestHexID: an event's ID gives its number and says whether the trace
// wrote it in hexadecimal (a PyTorch snapshot's addresses), as IDText
// shows it; a decimal id or a name is no address.
func TestHexID(t *testing.T) {
	r, err := traces.NewReader(strings.NewReader("op,id,size\nalloc,0x7f3a00000200,10\nalloc,12,10\nalloc,buf,10\n"), "t.csv", traces.Options{})
	require.NoError(t, err)
	type id struct {
		n   uint64
		hex bool
	}
	var got []id
	var texts []string
	for r.Scan() {
		ev := r.Event()
		n, hex := ev.HexID()
		got = append(got, id{n, hex})
		texts = append(texts, ev.IDText())
	}
	require.NoError(t, r.Err())
	assert.Equal(t, []id{{0x7f3a00000200, true}, {12, false}}, got[:2])
	assert.False(t, got[2].hex, "a name")
	assert.Equal(t, []string{"0x7f3a00000200", "12"}, texts[:2])
}
