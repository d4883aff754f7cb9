package transcript

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

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
