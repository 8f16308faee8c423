package diff_test

import (
	"fmt"

	"github.com/gpualloc/gpualloc/diff"
)

// Sites of two runs, matched by file and function: the line of an
// allocation may move between them.
func ExampleDiffSites() {
	a := []diff.Site{
		{Site: diff.MatchKey("data.py:12 load"), Bytes: 8 << 20, Count: 1},
		{Site: diff.MatchKey("model.py:40 forward"), Bytes: 32 << 20, Count: 2},
		{Site: diff.MatchKey("model.py:10 init"), Bytes: 64 << 20, Count: 1},
	}
	b := []diff.Site{
		{Site: diff.MatchKey("model.py:42 forward"), Bytes: 48 << 20, Count: 3},
		{Site: diff.MatchKey("model.py:10 init"), Bytes: 64 << 20, Count: 1},
		{Site: diff.MatchKey("prefetch.py:7 fill"), Bytes: 2 << 20, Count: 1},
	}
	for _, s := range diff.DiffSites(a, b) {
		fmt.Printf("%-20s %-6s %s\n", s.Site, s.Change, diff.Signed(s.DeltaBytes))
	}
	// Output:
	// model.py:forward     grown  +16.0 MiB
	// data.py:load         gone   -8.00 MiB
	// prefetch.py:fill     new    +2.00 MiB
	// model.py:init        same   0 B
}
