package transcript

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// MaxLine is the longest line read from a provider stream or an event log,
// and the largest event a transcript document is read with (16 MiB): memory
// follows the largest line, never the transcript's size. A longer line is
// reported with its file and number, read past, never held.
const MaxLine = 16 << 20

var (
	// ErrNotRegular: a name inside the storage root is a symbolic link, a
	// FIFO, a device or a directory where a transcript file belongs, or a
	// link or file where a directory belongs. It is refused, never followed.
	ErrNotRegular = errors.New("transcript: not a regular file")
	// ErrLineTooLong: a log line or a document's event is longer than
	// MaxLine. This package never writes one (Append refuses it).
	ErrLineTooLong = errors.New("transcript: line too long")
)

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

// lineReader reads the lines of one file, each at most MaxLine bytes,
// checking ctx between reads.
type lineReader struct {
	ctx  context.Context
	br   *bufio.Reader
	name string
	max  int
	n    int   // lines returned so far
	off  int64 // offset of the next line
	buf  []byte
}

func newLineReader(ctx context.Context, r io.Reader, name string) *lineReader {
	return &lineReader{ctx: ctx, br: bufio.NewReaderSize(r, 64<<10), name: name, max: MaxLine}
}

// next returns the next complete line without its newline (valid until the
// next call) and its offset. At the end it returns io.EOF and, in torn, the
// length of bytes after the last newline (a line being written, or torn by a
// crash), which are not kept. A line longer than the limit is ErrLineTooLong.
func (lr *lineReader) next() (line []byte, off int64, torn int64, err error) {
	if cap(lr.buf) > 1<<20 {
		lr.buf = nil // a long line does not pin its memory for the rest of the file
	}
	lr.buf = lr.buf[:0]
	off = lr.off
	var length int64
	for {
		if err := lr.ctx.Err(); err != nil {
			return nil, off, 0, err
		}
		chunk, rerr := lr.br.ReadSlice('\n')
		body := bytes.TrimSuffix(chunk, []byte{'\n'})
		length += int64(len(body))
		lr.off += int64(len(chunk))
		if length <= int64(lr.max) {
			lr.buf = appendBounded(lr.buf, body, lr.max)
		}
		switch {
		case errors.Is(rerr, bufio.ErrBufferFull):
			continue
		case rerr == io.EOF:
			return nil, off, length, io.EOF
		case rerr != nil:
			return nil, off, 0, fmt.Errorf("read %s: %w", lr.name, rerr)
		}
		lr.n++
		if length > int64(lr.max) {
			return nil, off, 0, fmt.Errorf("%w: %s line %d is %d bytes, longer than the %d-byte limit", ErrLineTooLong, lr.name, lr.n, length, lr.max)
		}
		return lr.buf, off, 0, nil
	}
}

// appendBounded appends b to buf, growing it by doubling but never past limit
// bytes, so a line just under the limit costs about twice the limit in
// allocations, and never more than the limit held.
func appendBounded(buf, b []byte, limit int) []byte {
	if need := len(buf) + len(b); need > cap(buf) {
		nb := make([]byte, len(buf), min(max(2*cap(buf), need, 4096), limit))
		copy(nb, buf)
		buf = nb
	}
	return append(buf, b...)
}

// Reader is one transcript opened for reading: its summary is read at once,
// its events are streamed by Each, so memory follows the largest event, never
// the transcript's size. Close releases it.
type Reader struct {
	t     Transcript
	count int
	f     *os.File
	// doc: the finished document; otherwise the event log, read up to end
	// (the last complete line when it was opened) with fold's plan.
	doc  bool
	end  int64
	fold *foldPlan
}

// Summary is the transcript without its events (Events is nil).
func (r *Reader) Summary() *Transcript { t := r.t; return &t }

// Len is the number of events Each yields.
func (r *Reader) Len() int { return r.count }

// Close closes the file.
func (r *Reader) Close() error { return r.f.Close() }

// Each calls fn with every event, in order, as a rendered transcript has
// them (a tool call carrying its final result); it stops at fn's first error
// or when ctx is done.
func (r *Reader) Each(ctx context.Context, fn func(Event) error) error {
	if r.doc {
		return eachDocEvent(ctx, r.f, func(e Event) error {
			compactInput(&e)
			return fn(e)
		})
	}
	return r.fold.each(ctx, r.f, r.end, fn)
}

// WriteJSON writes the transcript as one indented JSON document (the bytes
// json.MarshalIndent(t, "", "  ") gives the loaded transcript, plus a
// newline), streaming its events.
func (r *Reader) WriteJSON(ctx context.Context, w io.Writer) error {
	t := r.Summary()
	return writeDocument(w, t, func(fn func(Event) error) error { return r.Each(ctx, fn) })
}

// collect reads the whole transcript into memory.
func (r *Reader) collect(ctx context.Context) (*Transcript, error) {
	t := r.Summary()
	t.Events = make([]Event, 0, r.count)
	err := r.Each(ctx, func(e Event) error {
		t.Events = append(t.Events, e)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return t, nil
}

// Open opens the transcript for (session, agent) for reading: the finished
// document if there is one, else the running log.
func (s *Store) Open(ctx context.Context, session, agent string) (*Reader, error) {
	p, err := s.PathsFor(session, agent)
	if err != nil {
		return nil, err
	}
	return open(ctx, p)
}

// OpenPath is Open for a path naming a transcript's .json document, its
// .events.jsonl log, or their common stem; see LoadPath.
func OpenPath(ctx context.Context, path string) (*Reader, error) {
	base, named := stem(path)
	fi, statErr := os.Lstat(path)
	if statErr == nil && (!named || fi.IsDir()) {
		return nil, fmt.Errorf("%w: %s (a transcript is <agent-id>%s or <agent-id>%s below <root>/%s/<session-id>/)",
			ErrNotTranscript, path, finalSuffix, logSuffix, backgroundDir)
	}
	r, err := openFiles(ctx, Paths{Transcript: base + finalSuffix, Log: base + logSuffix})
	if errors.Is(err, ErrCorrupt) && statErr == nil && !ours(path) {
		return nil, fmt.Errorf("%w: %s holds no %s document or event log", ErrNotTranscript, path, Format)
	}
	return r, err
}

// open opens a transcript of the store, its directories checked first.
func open(ctx context.Context, p Paths) (*Reader, error) {
	if err := checkDirs(p); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%w: no transcript at %s", ErrNotFound, strings.TrimSuffix(p.Transcript, finalSuffix))
		}
		return nil, err
	}
	return openFiles(ctx, p)
}

func openFiles(ctx context.Context, p Paths) (*Reader, error) {
	f, err := openRegular(p.Transcript, os.O_RDONLY)
	if err == nil {
		r, err := openDoc(ctx, f)
		if err != nil {
			f.Close()
			return nil, err
		}
		return r, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	f, err = openRegular(p.Log, os.O_RDONLY)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: no transcript at %s", ErrNotFound, strings.TrimSuffix(p.Transcript, finalSuffix))
	}
	if err != nil {
		return nil, err
	}
	r, err := openLog(ctx, f)
	if err != nil {
		f.Close()
		return nil, err
	}
	return r, nil
}

// openLog reads a running log's summary and plans its rendering.
func openLog(ctx context.Context, f *os.File) (*Reader, error) {
	t, plan, end, err := planLog(ctx, f, f.Name())
	if err != nil {
		return nil, err
	}
	t.Path = f.Name()
	return &Reader{t: *t, count: plan.count, f: f, end: end, fold: plan}, nil
}

// openDoc reads a finished document's summary and counts its events.
func openDoc(ctx context.Context, f *os.File) (*Reader, error) {
	t, n, err := readDocSummary(ctx, f)
	if err != nil {
		return nil, err
	}
	t.Path = f.Name()
	return &Reader{t: *t, count: n, f: f, doc: true}, nil
}

// compactInput gives a tool input the compact bytes the log holds: the
// document's indentation re-indents it.
func compactInput(e *Event) {
	if e.Call != nil && len(e.Call.Input) > 0 {
		var c bytes.Buffer
		if json.Compact(&c, e.Call.Input) == nil {
			e.Call.Input = c.Bytes()
		}
	}
}
