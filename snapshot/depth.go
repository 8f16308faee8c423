package snapshot

import ogórek "github.com/kisielk/og-rek"

// Limits of an allocator_settings value that the package does not model.
const (
	maxPlainDepth = 64      // nesting of dicts, lists and tuples
	maxPlainItems = 1 << 20 // values in all
)

// tooLarge reports whether a decoded value is nested deeper than
// maxPlainDepth, holds more than maxPlainItems values (counting each visit
// of a value shared through the memo), or holds itself, as a dict that a
// pickle's memo puts inside itself does: converting it would never end.
func tooLarge(v any) bool {
	items := 0
	var walk func(v any, depth int) bool
	walk = func(v any, depth int) bool {
		items++
		if depth > maxPlainDepth || items > maxPlainItems {
			return true
		}
		switch x := v.(type) {
		case map[any]any:
			for k, e := range x {
				if walk(k, depth+1) || walk(e, depth+1) {
					return true
				}
			}
		case []any:
			for _, e := range x {
				if walk(e, depth+1) {
					return true
				}
			}
		case ogórek.Tuple:
			for _, e := range x {
				if walk(e, depth+1) {
					return true
				}
			}
		}
		return false
	}
	return walk(v, 0)
}
