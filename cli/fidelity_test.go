package cli

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A tiny pickle encoder (protocol 2: dicts, lists, strings, integers,
// bools), enough to write small PyTorch snapshots.

type pkKV struct {
	k string
	v any
}

type pkDict []pkKV

func pkValue(b *bytes.Buffer, v any) {
	switch x := v.(type) {
	case bool:
		if x {
			b.WriteByte(0x88)
		} else {
			b.WriteByte(0x89)
		}
	case int:
		pkValue(b, int64(x))
	case int64:
		b.WriteByte(0x8a) // LONG1, 8 bytes
		b.WriteByte(8)
		binary.Write(b, binary.LittleEndian, x)
	case uint64:
		b.WriteByte(0x8a)
		b.WriteByte(9)
		binary.Write(b, binary.LittleEndian, x)
		b.WriteByte(0)
	case float64:
		b.WriteByte('G')
		binary.Write(b, binary.BigEndian, x)
	case string:
		b.WriteByte('X')
		binary.Write(b, binary.LittleEndian, uint32(len(x)))
		b.WriteString(x)
	case []any:
		b.WriteByte(']')
		for _, e := range x {
			pkValue(b, e)
			b.WriteByte('a') // APPEND
		}
	case pkDict:
		b.WriteByte('}')
		for _, e := range x {
			pkValue(b, e.k)
			pkValue(b, e.v)
			b.WriteByte('s') // SETITEM
		}
	default:
		panic("pkValue: cannot encode this type")
	}
}

func pkPickle(v any) []byte {
	b := bytes.NewBuffer([]byte{0x80, 2})
	pkValue(b, v)
	b.WriteByte('.')
	return b.Bytes()
}

func pkEntry(action string, addr uint64, size int64) pkDict {
	return pkDict{{"action", action}, {"addr", addr}, {"size", size}, {"stream", 0}, {"frames", []any{}}}
}

func pkBlock(addr uint64, size, requested int64, state string) pkDict {
	return pkDict{{"address", addr}, {"size", size}, {"requested_size", requested}, {"state", state}}
}

func pkSegment(addr uint64, kind string, blocks ...any) pkDict {
	var total int64
	for _, b := range blocks {
		total += b.(pkDict)[1].v.(int64)
	}
	return pkDict{{"device", 0}, {"address", addr}, {"total_size", total}, {"stream", 0},
		{"segment_type", kind}, {"is_expandable", false}, {"blocks", blocks}}
}

var pkSettings = pkDict{{"PYTORCH_CUDA_ALLOC_CONF", ""}, {"max_split_size", -1}, {"garbage_collection_threshold", 0.0},
	{"expandable_segments", false}, {"roundup_power2_divisions", pkDict{{"1", 0}, {"2", 0}}}}

const (
	fA0 uint64 = 0x7f0000000000 // a small segment, 2 MiB
	fL0 uint64 = 0x7f0001000000 // a large segment, 20 MiB, allocated in the trace
)

// fidelitySnapshot is a snapshot whose trace starts with two blocks live in
// a small segment: it frees one and reuses its block, takes a large segment,
// frees the other and allocates 300 bytes at last, recorded at lastAddr
// (where PyTorch puts it: fA0; or elsewhere, for a mismatch).
func fidelitySnapshot(lastAddr uint64) []byte {
	var small []any
	if lastAddr == fA0 {
		small = []any{pkBlock(fA0, 512, 300, "active_allocated"), pkBlock(fA0+512, 512, 0, "inactive"),
			pkBlock(fA0+1024, 1024, 800, "active_allocated"), pkBlock(fA0+2048, 2<<20-2048, 0, "inactive")}
	} else {
		small = []any{pkBlock(fA0, 1024, 0, "inactive"), pkBlock(fA0+1024, 1024, 800, "active_allocated"),
			pkBlock(fA0+2048, 512, 300, "active_allocated"), pkBlock(fA0+2560, 2<<20-2560, 0, "inactive")}
	}
	segs := []any{
		pkSegment(fA0, "small", small...),
		pkSegment(fL0, "large", pkBlock(fL0, 5<<20, 5<<20, "active_allocated"), pkBlock(fL0+5<<20, 15<<20, 0, "inactive")),
	}
	trace := []any{
		pkEntry("free_requested", fA0+1024, 600),
		pkEntry("free_completed", fA0+1024, 600),
		pkEntry("alloc", fA0+1024, 800),
		pkEntry("segment_alloc", fL0, 20<<20),
		pkEntry("alloc", fL0, 5<<20),
		pkEntry("free_requested", fA0, 1000),
		pkEntry("free_completed", fA0, 1000),
		pkEntry("alloc", lastAddr, 300),
	}
	return pkPickle(pkDict{{"segments", segs}, {"device_traces", []any{trace}}, {"allocator_settings", pkSettings}})
}

// fidelityFiles are the test's snapshots, kept under testdata: -update
// rewrites them, and the test checks that they are what the encoder writes.
func fidelityFiles() map[string][]byte {
	bad := pkPickle(pkDict{{"segments", []any{}}, {"device_traces", []any{[]any{pkEntry("free_completed", fA0, 100)}}}})
	return map[string][]byte{
		"fidelity_match.pickle":    fidelitySnapshot(fA0),
		"fidelity_mismatch.pickle": fidelitySnapshot(fA0 + 2048),
		"fidelity_bad.pickle":      bad,
	}
}

func TestFidelityGolden(t *testing.T) {
	for name, data := range fidelityFiles() {
		path := filepath.Join("testdata", name)
		if *update {
			require.NoError(t, os.WriteFile(path, data, 0o644))
			continue
		}
		have, err := os.ReadFile(path)
		require.NoError(t, err, "run 'go test ./cli -update' to write it")
		require.Equal(t, data, have, "%s is not what the test's encoder writes (run with -update)", path)
	}
	p := func(name string) string { return "testdata/fidelity_" + name }
	for _, tc := range []struct {
		name string
		args []string
		code int
	}{
		{"fidelity_table", []string{"fidelity", p("match.pickle"), p("mismatch.pickle")}, 0},
		{"fidelity_json", []string{"fidelity", "-f", "json", p("match.pickle"), p("mismatch.pickle")}, 0},
		{"err_fidelity_bad", []string{"fidelity", p("match.pickle"), p("bad.pickle")}, 1},
		{"err_fidelity_not_snapshot", []string{"fidelity", "testdata/tiny.csv"}, 1},
		{"err_fidelity_no_args", []string{"fidelity"}, 2},
		{"err_fidelity_format", []string{"fidelity", "-f", "csv", p("match.pickle")}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := run(t, nil, tc.args...)
			assert.Equal(t, tc.code, code, "exit status; stderr: %s", stderr)
			golden(t, tc.name+".stdout", stdout)
			golden(t, tc.name+".stderr", stderr)
			if code != 0 {
				assert.Equal(t, 1, strings.Count(stderr, "\n"), "one line")
				assert.True(t, strings.HasPrefix(stderr, "simulate: "), stderr)
			}
		})
	}
}

// sharedSnapshotDir holds real PyTorch snapshots where the project's shared
// fixtures are checked out beside it.
const sharedSnapshotDir = "../../shared/traces/pytorch"

// TestFidelityShared replays the shared real snapshots and reports their
// match rates; the pytorch strategy takes every recorded decision.
func TestFidelityShared(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(sharedSnapshotDir, "*.pickle"))
	if len(files) == 0 {
		t.Skipf("no snapshots in %s: the shared fixtures are not checked out beside the project", sharedSnapshotDir)
	}
	code, stdout, stderr := run(t, nil, append([]string{"fidelity", "-f", "json"}, files...)...)
	require.Equal(t, 0, code, stderr)
	var res []struct {
		File           string  `json:"file"`
		Allocs         int64   `json:"allocs"`
		AddressMatches int64   `json:"address_matches"`
		SegmentAllocs  int64   `json:"segment_allocs"`
		SegmentMatches int64   `json:"segment_matches"`
		MatchRate      float64 `json:"match_rate"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &res))
	require.Len(t, res, len(files))
	for _, r := range res {
		t.Logf("%s: %d/%d addresses, %d/%d segments, match rate %.4f", filepath.Base(r.File),
			r.AddressMatches, r.Allocs, r.SegmentMatches, r.SegmentAllocs, r.MatchRate)
		assert.Equal(t, 1.0, r.MatchRate, "%s", r.File)
	}
}
