//go:build !windows

package transcript_test

import "syscall"

// limitFileSize makes writes past limit bytes fail with EFBIG in this
// process (RLIMIT_FSIZE; the Go runtime ignores SIGXFSZ), even as root.
func limitFileSize(limit uint64) error {
	return syscall.Setrlimit(syscall.RLIMIT_FSIZE, &syscall.Rlimit{Cur: limit, Max: ^uint64(0)})
}

const canLimitFileSize = true
