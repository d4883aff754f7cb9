package transcript

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Modes of what the store creates, whatever the umask: only the owner may
// list a session's agent ids or read a transcript.
const (
	dirMode  os.FileMode = 0o700
	fileMode os.FileMode = 0o600
)

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
