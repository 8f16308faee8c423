package snapshot_test

import (
	"bytes"
	"math"
	"math/big"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	pk "github.com/gpualloc/gpualloc/internal/pickletest"
	"github.com/gpualloc/gpualloc/snapshot"
)

// A typed is a value of one of the types that a pickle holds, and the
// name that Read's messages give its type.
type typed struct {
	name string
	v    any
	typ  string
}

var (
	pow100    = new(big.Int).Lsh(big.NewInt(1), 100)
	negPow100 = new(big.Int).Neg(pow100)
)

// everyType are values of every type of a pickle's data, of every width
// of integer.
var everyType = []typed{
	{"int", 7, "an integer"},
	{"negative int", -5, "an integer"},
	{"int of 2^64-1", uint64(math.MaxUint64), "an integer"},
	{"int of 2^100", pow100, "an integer"},
	{"int of -2^100", negPow100, "an integer"},
	{"None", nil, "None"},
	{"str", "x", "a string"},
	{"empty str", "", "a string"},
	{"bytes", pk.Bytes("b"), "bytes"},
	{"float", 1.5, "a float"},
	{"true", true, "a bool"},
	{"false", false, "a bool"},
	{"empty list", []any{}, "a list"},
	{"list", []any{1, []any{"a"}, pk.Dict{{K: "k", V: 1}}}, "a list"},
	{"empty dict", pk.Dict{}, "a dict"},
	{"dict of modelled keys", pk.Dict{{K: "action", V: "alloc"}, {K: "size", V: "x"}, {K: "frames", V: []any{1}}, {K: "blocks", V: 2}}, "a dict"},
	{"empty tuple", pk.Tuple{}, "a tuple"},
	{"tuple", pk.Tuple{1, "a", []any{}, pk.Dict{}}, "a tuple"},
	{"pair", [2]any{1, 2}, "a tuple"},
	{"set", pk.Set{Items: []any{1, "a"}}, "a set"},
	{"frozenset", pk.Set{Items: []any{2}, Frozen: true}, "a set"},
}

// fieldsSnapshot is a snapshot of one segment of two blocks and a trace of
// two entries with frames, with set called on each dict to change it.
func fieldsSnapshot(set func(where string, d pk.Dict) pk.Dict) pk.Dict {
	frame := func() pk.Dict {
		return set("frame", pk.Dict{{K: "name", V: "f"}, {K: "filename", V: "x.py"}, {K: "line", V: 3}})
	}
	block := func(addr uint64, size int64, state string) pk.Dict {
		return set("block", pk.Dict{{K: "address", V: addr}, {K: "size", V: size}, {K: "requested_size", V: size},
			{K: "state", V: state}, {K: "frames", V: []any{frame()}}})
	}
	seg := set("segment", pk.Dict{{K: "device", V: 0}, {K: "address", V: a0}, {K: "total_size", V: int64(2 << 20)},
		{K: "allocated_size", V: int64(512)}, {K: "active_size", V: int64(512)}, {K: "requested_size", V: int64(512)},
		{K: "stream", V: 0}, {K: "segment_type", V: "small"}, {K: "segment_pool_id", V: [2]any{0, 0}},
		{K: "is_expandable", V: false}, {K: "frames", V: []any{}},
		{K: "blocks", V: []any{block(a0, 512, "active_allocated"), block(a0+512, 2<<20-512, "inactive")}}})
	entry := func(action string, addr uint64, size, time int64) pk.Dict {
		return set("entry", pk.Dict{{K: "action", V: action}, {K: "addr", V: addr}, {K: "size", V: size},
			{K: "stream", V: 0}, {K: "time_us", V: time}, {K: "frames", V: []any{frame(), frame()}}})
	}
	return set("top", pk.Dict{{K: "segments", V: []any{seg}},
		{K: "device_traces", V: []any{[]any{entry("alloc", a0+512, 100, 1), entry("free_completed", a0+512, 100, 2)}}}})
}

// withField returns set for fieldsSnapshot that sets key in the dicts of
// role where to v, in the key's place if it has one, else last.
func withField(where, key string, v any) func(string, pk.Dict) pk.Dict {
	return func(w string, d pk.Dict) pk.Dict {
		if w != where {
			return d
		}
		for i := range d {
			if d[i].K == key {
				d[i].V = v
				return d
			}
		}
		return append(d, pk.KV{K: key, V: v})
	}
}

func encodings(d pk.Dict) map[string][]byte {
	return map[string][]byte{
		"protocol 2":         pk.Encode(d, pk.Options{Proto: 2}),
		"protocol 4, memo":   pk.Encode(d, pk.Options{Proto: 4, Memo: true}),
		"protocol 5, LONG1s": pk.Encode(d, pk.Options{Proto: 5, Memo: true, AllLong: true}),
	}
}

// TestReadFieldsNotNeeded reads a value of every type in each field that
// a replay does not need: a frame's name, filename and line, an entry's
// compile_context and user_metadata, and keys that the package does not
// model, in every dict. None fails the read; the frame's fields are kept
// where they are of the type PyTorch writes, else are "" or 0.
func TestReadFieldsNotNeeded(t *testing.T) {
	base, err := snapshot.Read(bytes.NewReader(pk.Encode(fieldsSnapshot(withField("", "", nil)), pk.Options{Proto: 4})), "f.pickle")
	require.NoError(t, err)
	places := []struct{ where, key string }{
		{"frame", "name"}, {"frame", "filename"}, {"frame", "line"}, {"frame", "column"},
		{"entry", "compile_context"}, {"entry", "user_metadata"}, {"entry", "memory_tag"},
		{"block", "memory_tag"}, {"segment", "lifetime"},
		{"top", "external_annotations"}, {"top", "physical_mappings"},
	}
	for _, pl := range places {
		for _, tv := range everyType {
			for enc, data := range encodings(fieldsSnapshot(withField(pl.where, pl.key, tv.v))) {
				s, err := snapshot.Read(bytes.NewReader(data), "f.pickle")
				require.NoError(t, err, "%s.%s = %s, %s", pl.where, pl.key, tv.name, enc)
				want := base.Frames[0]
				switch pl.key {
				case "name", "filename":
					str := ""
					switch x := tv.v.(type) {
					case string:
						str = x
					case pk.Bytes:
						str = string(x)
					}
					if pl.key == "name" {
						want.Name = str
					} else {
						want.Filename = str
					}
				case "line":
					want.Line = map[string]int64{"int": 7, "negative int": -5, "int of 2^64-1": -1}[tv.name]
				}
				exp := *base
				exp.Frames = []snapshot.Frame{want}
				require.Equal(t, snapshot.Flat(&exp), snapshot.Flat(s), "%s.%s = %s, %s", pl.where, pl.key, tv.name, enc)
			}
		}
	}
}

// TestReadFieldsNeeded reads a value of every type in each field that a
// replay needs: each is read, or refused with a message that names the
// field and says why, in the words of Python's types.
func TestReadFieldsNeeded(t *testing.T) {
	const (
		size = iota
		address
		time
		device
		str
		flag
	)
	fields := []struct {
		where, key, path string
		class            int
	}{
		{"entry", "size", "device_traces[0][0].size", size},
		{"entry", "addr", "device_traces[0][0].addr", address},
		{"entry", "stream", "device_traces[0][0].stream", address},
		{"entry", "time_us", "device_traces[0][0].time_us", time},
		{"entry", "action", "device_traces[0][0].action", str},
		{"entry", "category", "device_traces[0][0].category", str},
		{"block", "size", "segments[0].blocks[0].size", size},
		{"block", "requested_size", "segments[0].blocks[0].requested_size", size},
		{"block", "address", "segments[0].blocks[0].address", address},
		{"block", "state", "segments[0].blocks[0].state", str},
		{"segment", "device", "segments[0].device", device},
		{"segment", "address", "segments[0].address", address},
		{"segment", "total_size", "segments[0].total_size", size},
		{"segment", "allocated_size", "segments[0].allocated_size", size},
		{"segment", "active_size", "segments[0].active_size", size},
		{"segment", "requested_size", "segments[0].requested_size", size},
		{"segment", "stream", "segments[0].stream", address},
		{"segment", "segment_type", "segments[0].segment_type", str},
		{"segment", "is_expandable", "segments[0].is_expandable", flag},
	}
	// want returns the message's end for value tv in a field of class c,
	// "" for a value read.
	want := func(c int, tv typed) string {
		if tv.v == nil {
			return ""
		}
		isInt := strings.Contains(tv.name, "int")
		switch c {
		case str:
			if tv.typ == "a string" || tv.typ == "bytes" {
				return ""
			}
			return "not a string but " + tv.typ
		case flag:
			if isInt || tv.typ == "a bool" {
				return ""
			}
			return "not a bool but " + tv.typ
		}
		if !isInt {
			return "not an integer but " + tv.typ
		}
		most := map[int]string{size: " is more than 2^63-1 bytes", time: " is more than 2^63-1 microseconds",
			address: " is more than 2^64-1"}[c]
		switch tv.name {
		case "int":
			return ""
		case "negative int", "int of -2^100":
			if c == device {
				return "out of range: " + pk.IntText(tv.v)
			}
			return "negative: " + pk.IntText(tv.v)
		case "int of 2^64-1":
			switch c {
			case address:
				return ""
			case device:
				return "out of range: 18446744073709551615"
			}
			return "18446744073709551615" + most
		}
		if c == device {
			return "out of range: " + pow100.String()
		}
		return pow100.String() + most
	}
	for _, fd := range fields {
		for _, tv := range everyType {
			msg, path := want(fd.class, tv), fd.path
			switch {
			case tv.v == nil && fd.key == "action":
				path, msg = "device_traces[0][0]", "no action"
			case tv.v == nil && (fd.where+"."+fd.key == "entry.addr" || fd.where+"."+fd.key == "segment.address"):
				msg = "missing"
			case msg == "" && fd.key == "action":
				msg = "-" // read, but a trace of another action: not checked further
			}
			for enc, data := range encodings(fieldsSnapshot(withField(fd.where, fd.key, tv.v))) {
				_, err := snapshot.Read(bytes.NewReader(data), "f.pickle")
				switch msg {
				case "":
					require.NoError(t, err, "%s = %s, %s", path, tv.name, enc)
				case "-":
				default:
					require.EqualError(t, err, "f.pickle: "+path+": "+msg, "%s = %s, %s", path, tv.name, enc)
				}
			}
		}
	}
}
