package param

import (
	"fmt"
	"strings"
)

// enum is the type of a strategy's enumerated setting: small values,
// each with the name a spec gives it.
type enum interface{ ~uint8 }

// Name returns the name of v in a spec, names[v], or, for a value with no
// name, the type's name and the number, as "Growth(7)".
func Name[E enum](names []string, typ string, v E) string {
	if int(v) < len(names) {
		return names[v]
	}
	return fmt.Sprintf("%s(%d)", typ, uint8(v))
}

// Parse returns the value whose name in names is s, exactly as written.
func Parse[E enum](names []string, s string) (E, bool) {
	for v, name := range names {
		if name == s {
			return E(v), true
		}
	}
	return 0, false
}

// ParseFold returns the value whose name in names is s in any case, as
// "Block" for "block".
func ParseFold[E enum](names []string, s string) (E, bool) {
	for v, name := range names {
		if strings.EqualFold(name, s) {
			return E(v), true
		}
	}
	return 0, false
}
