package explain

import (
	"fmt"
	"io"
	"math"
	"math/big"
	"slices"

	ogórek "github.com/kisielk/og-rek"
)

// Annotations are what ByAnnotation groups the live bytes by: a PyTorch
// snapshot's "external_annotations", the ranges of time that the program
// named (torch.cuda.memory._record_memory_history records the
// record_function ranges, "Optimizer.step#AdamW.step", as START and END
// pairs with a device and a time), and the "user_metadata" of its trace
// entries (torch.cuda.memory._set_memory_metadata), which the snapshot
// package does not keep.
type Annotations struct {
	spans map[int][]span         // by device, in order of start
	meta  map[int]map[int]string // by device and entry index, the entries with metadata
}

// A span is a named range of time [start, end) of a device.
type span struct {
	name       string
	start, end int64
}

// ReadAnnotations reads the annotations of the PyTorch snapshot that r
// holds. It decodes the whole pickle as generic objects, with og-rek (no
// Python code runs: a class is only named): its memory grows with the
// file, several times its size.
func ReadAnnotations(r io.Reader) (a *Annotations, err error) {
	defer func() {
		if p := recover(); p != nil { // og-rek's decoder on a damaged pickle
			a, err = nil, fmt.Errorf("annotations: %v", p)
		}
	}()
	v, err := ogórek.NewDecoderWithConfig(r, &ogórek.DecoderConfig{}).Decode()
	if err != nil {
		return nil, fmt.Errorf("annotations: %w", err)
	}
	a = &Annotations{spans: map[int][]span{}, meta: map[int]map[int]string{}}
	top, ok := v.(map[any]any)
	if !ok {
		return a, nil
	}
	open := map[[2]any][]int64{} // START times not yet ended, by device and name
	list, _ := top["external_annotations"].([]any)
	for _, x := range list {
		m, ok := x.(map[any]any)
		if !ok {
			continue
		}
		stage, _ := m["stage"].(string)
		name, _ := m["name"].(string)
		dev, ok1 := toInt64(m["device"])
		t, ok2 := toInt64(m["time_us"])
		if !ok1 || !ok2 || name == "" {
			continue
		}
		k := [2]any{dev, name}
		switch stage {
		case "START":
			open[k] = append(open[k], t)
		case "END":
			if st := open[k]; len(st) > 0 {
				a.spans[int(dev)] = append(a.spans[int(dev)], span{name, st[len(st)-1], t})
				open[k] = st[:len(st)-1]
			}
		}
	}
	for k, st := range open { // ranges still open when the snapshot was taken
		for _, t := range st {
			d := int(k[0].(int64))
			a.spans[d] = append(a.spans[d], span{k[1].(string), t, math.MaxInt64})
		}
	}
	for d := range a.spans {
		slices.SortStableFunc(a.spans[d], func(x, y span) int {
			if x.start != y.start {
				return cmpInt(x.start, y.start)
			}
			return cmpInt(y.end, x.end) // the outer first
		})
	}
	devs, _ := top["device_traces"].([]any)
	for d, x := range devs {
		entries, _ := x.([]any)
		for j, e := range entries {
			m, ok := e.(map[any]any)
			if !ok {
				continue
			}
			if s, ok := m["user_metadata"].(string); ok && s != "" {
				if a.meta[d] == nil {
					a.meta[d] = map[int]string{}
				}
				a.meta[d][j] = s
			}
		}
	}
	return a, nil
}

// toInt64 returns an integer of og-rek's (an int64, or a *big.Int as a
// LONG1 opcode gives it) that fits in 64 bits.
func toInt64(v any) (int64, bool) {
	switch n := v.(type) {
	case int64:
		return n, true
	case *big.Int:
		if n.IsInt64() {
			return n.Int64(), true
		}
	}
	return 0, false
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// at returns the annotation of an allocation of device d made by entry j
// (-1: before the trace) at time t: its user_metadata, else the innermost
// range that holds t (the one that started last), else "".
func (a *Annotations) at(d, j int, t int64) string {
	if a == nil {
		return ""
	}
	if s := a.meta[d][j]; s != "" {
		return "metadata " + s
	}
	if j < 0 {
		return ""
	}
	name := ""
	for _, s := range a.spans[d] {
		if s.start > t {
			break
		}
		if t < s.end {
			name = s.name
		}
	}
	return name
}
