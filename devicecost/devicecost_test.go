package devicecost_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/gpualloc/gpualloc/devicecost"
)

// table is a complete table with cuMemAlloc measured at 4 KiB, 1 MiB and
// 4 MiB (a size that is no power of two too: 3 MiB), and every other call
// at one size.
const table = `# a test table
# gpu: Test GPU

call,size_bytes,ns
cuMemAlloc,4096,1000
cuMemAlloc,1048576,2000
cuMemAlloc,3145728,2000
cuMemAlloc,4194304,6000
cuMemFree,2097152,500
cuMemAddressReserve,2097152,10
cuMemAddressFree,2097152,20
cuMemCreate,2097152,300
cuMemRelease,2097152,400
cuMemMap,2097152,50
cuMemSetAccess,2097152,60
cuMemUnmap,2097152,70
`

func parse(t *testing.T, s string) *devicecost.Model {
	t.Helper()
	m, err := devicecost.Parse(strings.NewReader(s))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestCost(t *testing.T) {
	m := parse(t, table)
	if m.GPU != "Test GPU" {
		t.Errorf("GPU = %q", m.GPU)
	}
	for _, tt := range []struct {
		call devicecost.Call
		size int64
		want float64
	}{
		{devicecost.Malloc, 1, 1000},                // flat below the first size
		{devicecost.Malloc, 4096, 1000},             // measured
		{devicecost.Malloc, 1 << 20, 2000},          // measured
		{devicecost.Malloc, 1<<20 + 1<<19, 2000},    // between 1 and 2 MiB: 2 MiB's cost is 2000 too
		{devicecost.Malloc, 2 << 20, 2000},          // interpolated: 1 MiB and 3 MiB cost 2000
		{devicecost.Malloc, 4 << 20, 6000},          // measured
		{devicecost.Malloc, 8 << 20, 6000 + 4*4000}, // past the last: 4000 ns a MiB
		{devicecost.Free, 1, 500},                   // one point: flat
		{devicecost.Free, 1 << 40, 500},
		{devicecost.Map, 2 << 20, 110}, // cuMemMap and cuMemSetAccess
		{devicecost.Unmap, 4 << 20, 70},
	} {
		if got := m.Cost(tt.call, tt.size); math.Abs(got-tt.want) > 1e-6 {
			t.Errorf("Cost(%d, %d) = %g, want %g", tt.call, tt.size, got, tt.want)
		}
	}
	// Between powers of two the cost is linear: 3 MiB lies between 2 MiB
	// (2000) and 4 MiB (6000), whatever was measured at 3 MiB.
	if got := m.Cost(devicecost.Malloc, 3<<20); got != 4000 {
		t.Errorf("Cost(Malloc, 3 MiB) = %g, want 4000", got)
	}
}

// TestTally checks that a tally's estimate is the sum of each call's cost.
func TestTally(t *testing.T) {
	for _, m := range []*devicecost.Model{parse(t, table), devicecost.H200} {
		var tally devicecost.Tally
		want := 0.0
		rng := rand.New(rand.NewPCG(1, 2))
		for range 10000 {
			c := devicecost.Call(rng.IntN(8))
			size := int64(1) << rng.IntN(34)
			size += rng.Int64N(size)
			tally.Add(c, size)
			want += m.Cost(c, size)
		}
		if got := tally.Estimate(m); math.Abs(float64(got)-want) > 1+want*1e-12 {
			t.Errorf("%s: Estimate = %d, want %.0f", m.GPU, got, want)
		}
	}
	var empty devicecost.Tally
	if got := empty.Estimate(devicecost.H200); got != 0 {
		t.Errorf("empty tally = %d", got)
	}
}

// TestH200 checks the shipped table against what it was measured to be:
// costs that grow with size past a few MiB, in microseconds to
// milliseconds.
func TestH200(t *testing.T) {
	m := devicecost.H200
	if !strings.Contains(m.GPU, "H200") {
		t.Errorf("GPU = %q", m.GPU)
	}
	small, big := m.Cost(devicecost.Malloc, 2<<20), m.Cost(devicecost.Malloc, 1<<30)
	if small < 1e3 || small > 1e6 || big <= small {
		t.Errorf("cuMemAlloc: %g ns at 2 MiB, %g ns at 1 GiB", small, big)
	}
}

func TestParseErrors(t *testing.T) {
	full := strings.Split(strings.TrimSpace(table), "\n")
	for _, tt := range []struct {
		name, text, want string
	}{
		{"empty", "", `no header "call,size_bytes,ns"`},
		{"bad header", "call,size,ns\n", `line 1: header "call,size,ns", want "call,size_bytes,ns"`},
		{"fields", "call,size_bytes,ns\ncuMemAlloc,4096\n", "line 2: 2 fields, want 3 (call,size_bytes,ns)"},
		{"unknown call", "call,size_bytes,ns\ncudaMalloc,4096,1\n", `line 2: unknown call "cudaMalloc"`},
		{"zero size", "call,size_bytes,ns\ncuMemAlloc,0,1\n", `line 2: size_bytes "0" is not a positive whole number`},
		{"negative cost", "call,size_bytes,ns\ncuMemAlloc,1,-1\n", `line 2: ns "-1" is not a non-negative number`},
		{"NaN", "call,size_bytes,ns\ncuMemAlloc,1,NaN\n", `line 2: ns "NaN" is not a non-negative number`},
		{"twice", "call,size_bytes,ns\ncuMemAlloc,1,1\ncuMemAlloc,1,2\n", "line 3: a second cost of cuMemAlloc at 1 bytes"},
		{"missing call", strings.Join(full[:len(full)-1], "\n"), "no cost of cuMemUnmap"},
		{"cost too high", "call,size_bytes,ns\ncuMemAlloc,1,1e19\n", `line 2: ns "1e19" is more than 1e12 (1000 s for one call): the costs of a replay's calls could not be added up`},
		{"cost out of range", "call,size_bytes,ns\ncuMemAlloc,1,1e400\n", `line 2: ns "1e400" is more than 1e12 (1000 s for one call): the costs of a replay's calls could not be added up`},
		{"infinite cost", "call,size_bytes,ns\ncuMemAlloc,1,+Inf\n", `line 2: ns "+Inf" is more than 1e12 (1000 s for one call): the costs of a replay's calls could not be added up`},
		{"long line", "call,size_bytes,ns\n# " + strings.Repeat("x", 70000) + "\n", "line 2: longer than 64 KiB: not a table of costs"},
		{"long first line", strings.Repeat("\x00", 1<<20), "line 1: longer than 64 KiB: not a table of costs"},
		{"byte order mark elsewhere", "call,size_bytes,ns\n\ufeffcuMemAlloc,1,1\n", `line 2: unknown call "\ufeffcuMemAlloc"`},
	} {
		_, err := devicecost.Parse(strings.NewReader(tt.text))
		if err == nil || err.Error() != tt.want {
			t.Errorf("%s: error %v, want %q", tt.name, err, tt.want)
		}
	}
}

// TestParseLineNumbers: an error of a line is a *ParseError that gives the
// line's number apart, for a caller to name the file.
func TestParseLineNumbers(t *testing.T) {
	_, err := devicecost.Parse(strings.NewReader("# costs\n\ncall,size_bytes,ns\ncuMemAlloc,x,1\n"))
	var pe *devicecost.ParseError
	if !errors.As(err, &pe) || pe.Line != 4 || pe.Msg != `size_bytes "x" is not a positive whole number` {
		t.Errorf("error %#v", err)
	}
}

// TestByteOrderMark: a table that an editor saved with a UTF-8 byte order
// mark reads as the same table without it.
func TestByteOrderMark(t *testing.T) {
	for _, text := range []string{table, "# gpu: X\n" + table} {
		want := parse(t, text)
		got, err := devicecost.Parse(strings.NewReader("\ufeff" + text))
		if err != nil {
			t.Fatalf("with a byte order mark: %v", err)
		}
		if got.GPU != want.GPU || got.Cost(devicecost.Malloc, 4096) != want.Cost(devicecost.Malloc, 4096) {
			t.Errorf("with a byte order mark: GPU %q, cost %g; want %q, %g", got.GPU, got.Cost(devicecost.Malloc, 4096), want.GPU, want.Cost(devicecost.Malloc, 4096))
		}
	}
}

// TestEstimateSaturates: calls whose costs add up past what an int64
// holds estimate math.MaxInt64 nanoseconds, never a negative time.
func TestEstimateSaturates(t *testing.T) {
	m := parse(t, table)
	var tally devicecost.Tally
	for range 1000 {
		tally.Add(devicecost.Malloc, 1<<62) // far past the table: the last slope
	}
	if got := tally.Estimate(m); got != math.MaxInt64 {
		t.Errorf("Estimate = %d, want math.MaxInt64", got)
	}
	var small devicecost.Tally
	small.Add(devicecost.Malloc, 4096)
	if got := small.Estimate(m); got != 1000 {
		t.Errorf("one call at 4 KiB: Estimate = %d, want 1000", got)
	}
}

func FuzzParse(f *testing.F) {
	f.Add(table)
	f.Add("call,size_bytes,ns\ncuMemAlloc,1,1e308\n")
	f.Fuzz(func(t *testing.T, s string) {
		m, err := devicecost.Parse(strings.NewReader(s))
		if err != nil {
			if strings.ContainsAny(err.Error(), "\n") {
				t.Errorf("error of more than one line: %q", err)
			}
			return
		}
		for c := range devicecost.Call(8) {
			for _, size := range []int64{1, 4096, 2 << 20, 1 << 40} {
				if v := m.Cost(c, size); v < 0 || math.IsNaN(v) {
					t.Errorf("Cost(%d, %d) = %g", c, size, v)
				}
			}
		}
	})
}

// A replay counts its device calls in a Tally and estimates their time on
// the GPU a table was measured on.
func ExampleTally() {
	var t devicecost.Tally
	for range 100 {
		t.Add(devicecost.Malloc, 20<<20) // PyTorch's large segments
	}
	t.Add(devicecost.Free, 20<<20)
	ms := float64(t.Estimate(devicecost.H200)) / 1e6
	fmt.Printf("about %.0f ms on an %s\n", math.Round(ms), devicecost.H200.GPU)
	// Output: about 5 ms on an NVIDIA H200
}
