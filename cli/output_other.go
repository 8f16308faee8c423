//go:build !unix

package cli

// canWrite returns nil: where access(2) is missing, the open that writes
// the file says why it cannot.
func canWrite(path string) error { return nil }
