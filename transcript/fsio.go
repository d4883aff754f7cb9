package transcript

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// Modes of what the store creates, whatever the umask: only the owner may
// list a session's agent ids or read a transcript.
const (
	dirMode  os.FileMode = 0o700
	fileMode os.FileMode = 0o600
)

// ErrNotRegular: a name inside the storage root is a symbolic link, a
// FIFO, a device or a directory where a transcript file belongs, or a
// link or file where a directory belongs. It is refused, never followed.
var ErrNotRegular = errors.New("transcript: not a regular file")

// notRegular says what path is instead of a regular file.
func notRegular(path string) error {
	what := "not a regular file"
	if fi, err := os.Lstat(path); err == nil {
		what = "a " + kindOf(fi.Mode())
	}
	return fmt.Errorf("%w: %s is %s", ErrNotRegular, path, what)
}

func kindOf(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return "symbolic link"
	case m&fs.ModeNamedPipe != 0:
		return "named pipe (FIFO)"
	case m&fs.ModeDevice != 0:
		return "device"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m.IsDir():
		return "directory"
	case m.IsRegular():
		return "regular file"
	}
	return "special file"
}

// checkDir reports whether dir, a directory inside the storage root, exists
// as a directory of its own: a symbolic link there is refused, not followed.
// A missing dir is os.ErrNotExist.
func checkDir(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%w: %s is a %s, not a directory", ErrNotRegular, dir, kindOf(fi.Mode()))
	}
	return nil
}

// checkDirs checks the directories of p below the root (background/ and the
// session's).
func checkDirs(p Paths) error {
	session := filepath.Dir(p.Log)
	for _, d := range []string{filepath.Dir(session), session} {
		if err := checkDir(d); err != nil {
			return err
		}
	}
	return nil
}

// readCheckedDir lists the last of dirs once each of them, outermost first,
// passes checkDir. A missing one is no entries, not an error.
func readCheckedDir(dirs ...string) ([]os.DirEntry, error) {
	for _, d := range dirs {
		err := checkDir(d)
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
	}
	return os.ReadDir(dirs[len(dirs)-1])
}

// publish makes what write writes appear at dir/name complete or not at all,
// and never over an existing file: it writes and fsyncs a temporary file
// (mode 0600) in the same directory, then gives it the final name with
// placeNew (a hard link and a directory fsync on unix, a no-replace
// write-through move on Windows). existsErr is returned, wrapped, when the
// name is taken.
func publish(dir, name string, write func(io.Writer) error, existsErr error) error {
	tmp, err := os.CreateTemp(dir, "."+name+".*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(fileMode); err != nil {
		tmp.Close()
		return err
	}
	if err := write(tmp); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", tmp.Name(), err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("fsync %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	final := filepath.Join(dir, name)
	if err := placeNew(dir, tmp.Name(), final); err != nil {
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("%w: %s", existsErr, final)
		}
		return err
	}
	return nil
}

// mkdirAllSynced creates dir and its missing parents (mode 0700, set
// explicitly since the umask may have taken bits off), fsyncing each parent
// whose entries changed so the new directories survive a crash. dir and the
// inside-1 directories above it, below the storage root, must be directories
// of their own (Lstat): a symbolic link there is refused, not followed.
func mkdirAllSynced(dir string, inside int) error {
	if inside == 0 {
		// The root itself: the host names it, and may name it by a link.
		if fi, err := os.Stat(dir); err == nil {
			if !fi.IsDir() {
				return fmt.Errorf("%s is not a directory", dir)
			}
			return nil
		}
	} else if err := checkDir(dir); !errors.Is(err, os.ErrNotExist) {
		return err
	}
	parent := filepath.Dir(dir)
	if parent != dir {
		if err := mkdirAllSynced(parent, max(inside-1, 0)); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, dirMode); err != nil {
		if errors.Is(err, os.ErrExist) {
			return mkdirAllSynced(dir, inside) // made meanwhile: check it again
		}
		return err
	}
	if err := os.Chmod(dir, dirMode); err != nil {
		return err
	}
	return syncDir(parent)
}

// lastSeq returns the seq of the log's last whole line. A torn last line (no
// trailing newline: a crash while it was written) is cut off first, so the
// next append starts on a line boundary. The caller holds the log's lock.
func lastSeq(f *os.File) (int64, error) {
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	size := fi.Size()
	end, err := lastNewline(f, size)
	if err != nil {
		return 0, err
	}
	if end < 0 {
		return 0, fmt.Errorf("%w: %s has no complete header line", ErrCorrupt, f.Name())
	}
	if end+1 != size {
		if err := f.Truncate(end + 1); err != nil {
			return 0, fmt.Errorf("cut torn line off %s: %w", f.Name(), err)
		}
	}
	start, err := lastNewline(f, end)
	if err != nil {
		return 0, err
	}
	if n := end - (start + 1); n > MaxLine {
		return 0, fmt.Errorf("%w: %s: last line is %d bytes, longer than the %d-byte limit", ErrLineTooLong, f.Name(), n, MaxLine)
	}
	line := make([]byte, end-(start+1))
	if _, err := f.ReadAt(line, start+1); err != nil {
		return 0, err
	}
	var l struct {
		Seq *int64 `json:"seq"`
	}
	if err := json.Unmarshal(line, &l); err != nil || l.Seq == nil {
		return 0, fmt.Errorf("%w: %s: last line does not parse (%v)", ErrCorrupt, f.Name(), err)
	}
	return *l.Seq, nil
}

// lastNewline returns the offset of the last '\n' before offset end, or -1.
func lastNewline(f *os.File, end int64) (int64, error) {
	const chunk = 32 << 10
	buf := make([]byte, chunk)
	for end > 0 {
		n := int64(chunk)
		if n > end {
			n = end
		}
		b := buf[:n]
		if _, err := f.ReadAt(b, end-n); err != nil {
			return 0, err
		}
		if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
			return end - n + int64(i), nil
		}
		end -= n
	}
	return -1, nil
}

// openLocked opens the log of a created transcript and takes its exclusive
// lock, then checks it is not finished. The caller releases it with
// closeLocked.
func (s *Store) openLocked(p Paths) (*os.File, error) {
	// Not O_APPEND: on Windows an append-only handle lacks FILE_WRITE_DATA,
	// so cutting a torn line or a failed append off (SetEndOfFile) would be
	// refused. Appends write at the end explicitly, under the lock.
	// Only a regular file is opened: a symbolic link planted in place of
	// the log (or of a directory above it) is refused, never written.
	if err := checkDirs(p); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%w: %s was never created", ErrNotFound, p.Log)
		}
		return nil, err
	}
	f, err := openRegular(p.Log, os.O_RDWR)
	if errors.Is(err, os.ErrNotExist) {
		if _, serr := os.Lstat(p.Transcript); serr == nil {
			return nil, fmt.Errorf("%w: %s", ErrFinished, p.Transcript)
		}
		return nil, fmt.Errorf("%w: %s was never created", ErrNotFound, p.Log)
	}
	if err != nil {
		return nil, err
	}
	if err := lockFile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", p.Log, err)
	}
	if _, err := os.Lstat(p.Transcript); err == nil {
		closeLocked(f)
		return nil, fmt.Errorf("%w: %s", ErrFinished, p.Transcript)
	} else if !errors.Is(err, os.ErrNotExist) {
		closeLocked(f)
		return nil, err
	}
	return f, nil
}

// closeLocked releases openLocked's lock and closes the file. Closing alone
// releases it on unix, but on Windows only whenever the system gets to it.
func closeLocked(f *os.File) {
	_ = unlockFile(f)
	f.Close()
}

// undoAppend cuts the log back to size after a failed append.
func undoAppend(f *os.File, size int64, err error) error {
	if terr := f.Truncate(size); terr != nil {
		return errors.Join(err, fmt.Errorf("cut failed append off %s: %w", f.Name(), terr))
	}
	if serr := f.Sync(); serr != nil {
		return errors.Join(err, fmt.Errorf("fsync %s: %w", f.Name(), serr))
	}
	return err
}
