// Package dirtest helps tests look at what a directory holds.
package dirtest

import (
	"os"
	"testing"
)

// Names returns the names of what dir holds, in the order of their names
// (os.ReadDir's), or fails the test when dir cannot be read.
func Names(t testing.TB, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}
