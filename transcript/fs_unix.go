//go:build !windows

package transcript

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// lockFile takes an exclusive flock(2) on f, held until unlockFile or until
// f is closed. It is per open file description, so it excludes other
// processes and other opens in this process alike. flock is advisory: readers
// that do not lock read the log while an append holds it.
func lockFile(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

// unlockFile releases lockFile's lock.
func unlockFile(f *os.File) error {
	return syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
}

// placeNew gives the complete, fsynced file tmp the name final, failing with
// an error satisfying errors.Is(err, os.ErrExist) if final exists: link(2)
// refuses an existing name where rename(2) would replace it. It then removes
// the temporary name and fsyncs the directory, so the new name survives a
// crash.
func placeNew(dir, tmp, final string) error {
	if err := os.Link(tmp, final); err != nil {
		return err
	}
	if err := os.Remove(tmp); err != nil {
		return err
	}
	return syncDir(dir)
}

// syncDir fsyncs a directory, making the entries created in it durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync directory %s: %w", dir, err)
	}
	return nil
}
