package transcript

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/windows"
)

// openRegular opens path with flag (os.O_RDONLY or os.O_RDWR), only if it is
// a regular file. Windows has no O_NOFOLLOW: the name is checked with Lstat
// first (a symbolic link or junction, a directory or a device is refused),
// and the opened handle must be that same file, so a link planted between
// the check and the open is refused too.
func openRegular(path string, flag int) (*os.File, error) {
	before, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	if !before.Mode().IsRegular() {
		return nil, notRegular(path)
	}
	f, err := os.OpenFile(path, flag, 0)
	if err != nil {
		return nil, err
	}
	after, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	if !after.Mode().IsRegular() || !os.SameFile(before, after) {
		f.Close()
		return nil, notRegular(path)
	}
	return f, nil
}

// Windows byte-range locks are mandatory: a locked byte cannot be read or
// written through any other handle. The lock therefore covers one byte far
// past the end of any log (locking beyond the end of a file is allowed), so
// readers of a running transcript are never refused while an append holds it.
const (
	lockOffsetHigh = 0x7fffffff
	lockLen        = 1
)

// lockFile takes an exclusive LockFileEx lock on f, waiting for it, held until
// unlockFile. The lock belongs to the handle, so it excludes other processes
// and other opens in this process alike, as flock does on unix.
func lockFile(f *os.File) error {
	ol := windows.Overlapped{OffsetHigh: lockOffsetHigh}
	return windows.LockFileEx(windows.Handle(f.Fd()), windows.LOCKFILE_EXCLUSIVE_LOCK, 0, lockLen, 0, &ol)
}

// unlockFile releases lockFile's lock. Windows releases a closed handle's
// locks only when the system gets to it, so the lock is released explicitly
// before the file is closed.
func unlockFile(f *os.File) error {
	ol := windows.Overlapped{OffsetHigh: lockOffsetHigh}
	return windows.UnlockFileEx(windows.Handle(f.Fd()), 0, lockLen, 0, &ol)
}

// placeNew gives the complete, flushed file tmp the name final, failing with
// an error satisfying errors.Is(err, os.ErrExist) if final exists. On Windows
// a MoveFileEx without MOVEFILE_REPLACE_EXISTING is that primitive (os.Rename
// would replace), and it needs no hard-link support from the filesystem
// (FAT and exFAT have none). MOVEFILE_WRITE_THROUGH returns only once the move
// is on disk: Windows has no directory fsync (FlushFileBuffers refuses a
// directory handle opened for reading), so this is what makes the name
// durable.
func placeNew(_, tmp, final string) error {
	from, err := windows.UTF16PtrFromString(longPath(tmp))
	if err != nil {
		return &os.LinkError{Op: "movefileex", Old: tmp, New: final, Err: err}
	}
	to, err := windows.UTF16PtrFromString(longPath(final))
	if err != nil {
		return &os.LinkError{Op: "movefileex", Old: tmp, New: final, Err: err}
	}
	if err := windows.MoveFileEx(from, to, windows.MOVEFILE_WRITE_THROUGH); err != nil {
		return &os.LinkError{Op: "movefileex", Old: tmp, New: final, Err: err}
	}
	return nil
}

// syncDir is a no-op on Windows: there is no directory fsync. NTFS journals
// directory changes; a directory created just before a crash may be lost,
// which reads as a transcript never created, never as a torn one, and the
// transcript files themselves are placed with MOVEFILE_WRITE_THROUGH.
func syncDir(string) error { return nil }

// longPath spells an absolute path so the Win32 API accepts it past MAX_PATH
// (the os package does the same internally for its own calls).
func longPath(p string) string {
	if len(p) < 248 || strings.HasPrefix(p, `\\?\`) || !filepath.IsAbs(p) {
		return p
	}
	if strings.HasPrefix(p, `\\`) {
		return `\\?\UNC\` + p[2:]
	}
	return `\\?\` + p
}
