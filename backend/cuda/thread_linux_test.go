package cuda

import "syscall"

// threadID identifies the calling OS thread.
func threadID() int { return syscall.Gettid() }
