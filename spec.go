package gpualloc

import (
	"fmt"
	"strconv"
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
//
// A value may hold commas in two ways. A piece after a comma that holds a
// colon and no "=" continues the value before it, so that a value written
// in a key:value syntax of its own needs nothing more, as the pytorch
// strategy's conf in PyTorch's syntax:
// "pytorch:conf=max_split_size_mb:128,expandable_segments:True". And a
// value may be double-quoted, with Go's escapes, to hold any text:
// `bestfit:name="a,b=c"`. [Spec.String] quotes a value only where the
// plain form would not parse back.
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
	bad := func(format string, args ...any) (Spec, error) {
		return Spec{}, fmt.Errorf("bad strategy spec %q: %s", s, fmt.Sprintf(format, args...))
	}
	lastQuoted := false
	for i := 0; ; {
		end := len(rest)
		if j := strings.IndexByte(rest[i:], ','); j >= 0 {
			end = i + j
		}
		piece := rest[i:end]
		eq := strings.IndexByte(piece, '=')
		if eq < 0 {
			p := strings.TrimSpace(piece)
			if len(sp.Params) == 0 || lastQuoted || !strings.Contains(p, ":") {
				return bad("parameter %q is not key=value", p)
			}
			last := &sp.Params[len(sp.Params)-1]
			last.Value += "," + p
		} else {
			k, v := strings.TrimSpace(piece[:eq]), strings.TrimSpace(piece[eq+1:])
			lastQuoted = strings.HasPrefix(v, `"`)
			if lastQuoted {
				// The quoted value may hold commas: read it from the
				// text after the '=', not from the piece.
				start := i + eq + 1 + strings.IndexByte(piece[eq+1:], '"')
				q, err := strconv.QuotedPrefix(rest[start:])
				if err != nil {
					return bad("parameter %q: the quoted value has no closing '\"' or a bad escape", k)
				}
				v, _ = strconv.Unquote(q)
				end = len(rest)
				if j := strings.IndexByte(rest[start+len(q):], ','); j >= 0 {
					end = start + len(q) + j
				}
				if strings.TrimSpace(rest[start+len(q):end]) != "" {
					return bad("parameter %q: text after the quoted value", k)
				}
			}
			if k == "" || (v == "" && !lastQuoted) {
				return bad("parameter %q is not key=value", strings.TrimSpace(piece))
			}
			for _, p := range sp.Params {
				if strings.EqualFold(p.Key, k) {
					return bad("parameter %q given twice", k)
				}
			}
			sp.Params = append(sp.Params, KeyValue{k, v})
		}
		if end >= len(rest) {
			return sp, nil
		}
		i = end + 1
	}
}

// String formats the spec as "name" or "name:key=value,...", which
// [ParseSpec] reads back as the same Spec: a value is written as it is
// unless that would read back otherwise (an empty value, space around it,
// a leading '"', or a comma not followed by a key:value setting), and then
// it is double-quoted.
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
		if plainValue(p.Value) {
			b.WriteString(p.Value)
		} else {
			b.WriteString(strconv.Quote(p.Value))
		}
	}
	return b.String()
}

// plainValue reports whether a value, written without quotes after
// "key=", reads back as itself.
func plainValue(v string) bool {
	if v == "" || strings.HasPrefix(v, `"`) {
		return false
	}
	for i, piece := range strings.Split(v, ",") {
		if piece == "" || piece != strings.TrimSpace(piece) {
			return false
		}
		if i > 0 && (strings.Contains(piece, "=") || !strings.Contains(piece, ":")) {
			return false
		}
	}
	return true
}
