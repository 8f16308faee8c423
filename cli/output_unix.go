//go:build unix

package cli

import "syscall"

// canWrite returns why the process may not write the file at path, nil
// when it may.
func canWrite(path string) error {
	const wOK = 2 // W_OK of access(2)
	return syscall.Access(path, wOK)
}
