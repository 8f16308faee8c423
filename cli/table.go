package cli

import "github.com/gpualloc/gpualloc/internal/tabular"

// plural formats a count of things: "1 bad event", "2 bad events".
func plural(n int64, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return tabular.Count(n) + " " + thing + "s"
}
