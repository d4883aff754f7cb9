//go:build !windows

package transcript

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// openRegular opens path with flag (os.O_RDONLY or os.O_RDWR), only if it is
// a regular file: O_NOFOLLOW refuses a symbolic link in its last component,
// O_NONBLOCK keeps the open of a FIFO from waiting for a writer, and fstat on
// the opened descriptor refuses a FIFO, a device or a directory. The file is
// blocking again once it is known to be regular.
func openRegular(path string, flag int) (*os.File, error) {
	var (
		fd  int
		err error
	)
	for {
		fd, err = syscall.Open(path, flag|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		if errors.Is(err, syscall.ELOOP) || errors.Is(err, syscall.EMLINK) {
			return nil, notRegular(path)
		}
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		syscall.Close(fd)
		return nil, &os.PathError{Op: "fstat", Path: path, Err: err}
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		syscall.Close(fd)
		return nil, notRegular(path)
	}
	if err := syscall.SetNonblock(fd, false); err != nil {
		syscall.Close(fd)
		return nil, &os.PathError{Op: "fcntl", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

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
