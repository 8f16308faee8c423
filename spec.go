package gpualloc

import (
	"fmt"
	"strings"
)

// A Spec names a strategy and the parameters written with it, as in
// "round:cutoff=20,page=4096". Its String form parses back to the same Spec.
type Spec struct {
	Name   string
	Params []KeyValue // in the order written
}

// A KeyValue is one parameter of a [Spec].
type KeyValue struct {
	Key, Value string
}

// ParseSpec parses "name" or "name:key=value,key=value". Space around names,
// keys and values is ignored; a key may appear once.
func ParseSpec(s string) (Spec, error) {
	name, rest, hasParams := strings.Cut(s, ":")
	sp := Spec{Name: strings.TrimSpace(name)}
	if sp.Name == "" {
		return Spec{}, fmt.Errorf("bad strategy spec %q: no strategy name", s)
	}
	if !hasParams {
		return sp, nil
	}
	if strings.TrimSpace(rest) == "" {
		return Spec{}, fmt.Errorf("bad strategy spec %q: no parameters after ':'", s)
	}
	for _, kv := range strings.Split(rest, ",") {
		k, v, ok := strings.Cut(kv, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || k == "" || v == "" {
			return Spec{}, fmt.Errorf("bad strategy spec %q: parameter %q is not key=value", s, strings.TrimSpace(kv))
		}
		for _, p := range sp.Params {
			if strings.EqualFold(p.Key, k) {
				return Spec{}, fmt.Errorf("bad strategy spec %q: parameter %q given twice", s, k)
			}
		}
		sp.Params = append(sp.Params, KeyValue{k, v})
	}
	return sp, nil
}

// String formats the spec as "name" or "name:key=value,...".
func (s Spec) String() string {
	if len(s.Params) == 0 {
		return s.Name
	}
	var b strings.Builder
	b.WriteString(s.Name)
	for i, p := range s.Params {
		if i == 0 {
			b.WriteByte(':')
		} else {
			b.WriteByte(',')
		}
		b.WriteString(p.Key)
		b.WriteByte('=')
		b.WriteString(p.Value)
	}
	return b.String()
}
