// Package transcript keeps one durable, immutable, provider-neutral transcript
// per background agent execution (run_in_background, todo-task delegation,
// scheduled children), below a conversation-storage root:
//
//	<root>/background/<parent-session-id>/<agent-id>.events.jsonl
//	<root>/background/<parent-session-id>/<agent-id>.json
//
// The .events.jsonl file is the append-only event log: its first line is the
// header, written before the child's first provider turn, and every append
// adds whole lines and fsyncs before returning. The .json file is the readable
// transcript; it is published exactly once, at finish, by linking a complete,
// fsynced temporary file into place (link fails if the name exists, so a
// second finisher — in any process — cannot replace it). Its existence is the
// commit point of finish: once it exists the transcript is immutable.
//
// Appends and finish serialize on an OS file lock on the log (flock on unix,
// LockFileEx on Windows), so they are safe across processes, not only
// goroutines. A crash at any instant
// leaves either no transcript (before the header is linked), a running one
// whose log ends at the last whole line (a torn last line is ignored on read
// and cut off by the next append), or the finished document.
//
// With WithLifecycle, every create, append and finish also records its
// outcome in background_agent_log.transcript_status ('ok' or 'error: …') so a
// reader of the lifecycle table can tell a real transcript from a missing one.
package transcript

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/schemastate/schemastate/transcript/internal/normalize"
)

// Sentinel errors; test with errors.Is.
var (
	// ErrInvalidID: a session or agent id cannot be a path component.
	ErrInvalidID = errors.New("transcript: invalid id")
	// ErrExists: Create found a transcript already there (it is never overwritten).
	ErrExists = errors.New("transcript: already exists")
	// ErrNotFound: no transcript was ever created for the id. Appends and
	// finishes for such an id are rejected, never fabricated.
	ErrNotFound = errors.New("transcript: not found")
	// ErrFinished: the transcript is already terminal. A second Finish is a
	// no-op reporting this; an Append after finish is rejected with it.
	ErrFinished = errors.New("transcript: already finished")
	// ErrCorrupt: a transcript file holds something this package never writes.
	ErrCorrupt = errors.New("transcript: corrupt")
	// ErrNotTranscript: LoadPath was given a file that is not a transcript
	// at all (another name, another document, a provider stream).
	ErrNotTranscript = errors.New("transcript: not a transcript")
	// ErrInvalidEvent: an event does not satisfy the normalized contract.
	ErrInvalidEvent = normalize.ErrInvalidEvent
	// ErrLifecycle wraps a failure to record an outcome in
	// background_agent_log; the file operation itself is complete.
	ErrLifecycle = errors.New("transcript: lifecycle record failed")
)

const (
	backgroundDir = "background"
	logSuffix     = ".events.jsonl"
	finalSuffix   = ".json"
	maxIDLen      = 200
)

// Store is a transcript store rooted at a conversation-storage directory. It
// holds no state about transcripts in memory: everything is read from disk.
type Store struct {
	root      string
	life      *Lifecycle
	workspace string
	now       func() time.Time
}

// Option configures a Store.
type Option func(*Store)

// WithLifecycle records every operation's outcome in background_agent_log
// rows identified by (workspacePath, session, agent).
func WithLifecycle(l *Lifecycle, workspacePath string) Option {
	return func(s *Store) { s.life, s.workspace = l, workspacePath }
}

// WithClock sets the clock used for default timestamps.
func WithClock(now func() time.Time) Option { return func(s *Store) { s.now = now } }

// NewStore returns a store rooted at root (made absolute). Nothing is created
// until the first transcript is.
func NewStore(root string, opts ...Option) (*Store, error) {
	if root == "" {
		return nil, errors.New("transcript: empty storage root")
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("transcript: storage root %q: %w", root, err)
	}
	s := &Store{root: abs, now: time.Now}
	for _, o := range opts {
		o(s)
	}
	return s, nil
}

// Root is the absolute storage root.
func (s *Store) Root() string { return s.root }

// Paths are the two files of one transcript.
type Paths struct {
	// Transcript is the readable document (exists once finished).
	Transcript string `json:"transcript"`
	// Log is the append-only event log (exists once created).
	Log string `json:"log"`
}

// PathsFor returns the files of the transcript for (session, agent).
func (s *Store) PathsFor(session, agent string) (Paths, error) {
	if err := ValidateID("session id", session); err != nil {
		return Paths{}, err
	}
	if err := ValidateID("agent id", agent); err != nil {
		return Paths{}, err
	}
	base := filepath.Join(s.root, backgroundDir, session, agent)
	return Paths{Transcript: base + finalSuffix, Log: base + logSuffix}, nil
}

// Create writes the header of a new transcript, status running. Call it
// before the child's first provider turn (requirement 1). It never overwrites:
// a transcript already there (running or finished) yields ErrExists.
func (s *Store) Create(ctx context.Context, h Header) error {
	if h.StartedAt.IsZero() {
		h.StartedAt = s.now()
	}
	h.StartedAt = h.StartedAt.UTC()
	// Ids and header are checked before anything is written: a row started
	// for a transcript that can never exist would stay running for ever,
	// and no Recover would ever see it.
	p, err := s.PathsFor(h.ParentSessionID, h.AgentID)
	if err != nil {
		return err
	}
	if h.Kind == "" {
		return fmt.Errorf("%w: header needs a kind", ErrInvalidEvent)
	}
	if err := caseTwins(p); err != nil {
		return err
	}
	// The lifecycle row is written first: from the moment the transcript
	// exists its execution is alive per background_agent_log, so a Recover
	// running concurrently never finishes a child that is being created.
	var startErr error
	if s.life != nil {
		startErr = s.life.Start(ctx, Entry{
			WorkspacePath: s.workspace, SessionID: h.ParentSessionID, AgentID: h.AgentID,
			ExecutionID: h.ExecutionID, Kind: string(h.Kind), Provider: h.Provider, Model: h.Model,
			Status: string(Running), StartedAt: h.StartedAt,
		})
	}
	err = s.create(p, h)
	if errors.Is(err, ErrExists) {
		// The transcript that is there is intact; nothing to record.
		return err
	}
	return s.record(ctx, "create", h.ParentSessionID, h.AgentID, p.Transcript, err, func(*Lifecycle) error { return startErr })
}

func (s *Store) create(p Paths, h Header) error {
	dir := filepath.Dir(p.Log)
	if err := mkdirAllSynced(dir, 2); err != nil {
		return err
	}
	if _, err := os.Lstat(p.Transcript); err == nil {
		return fmt.Errorf("%w: %s", ErrExists, p.Transcript)
	}
	line, err := json.Marshal(logLine{Event: Event{Seq: 0, At: h.StartedAt, Type: headerType}, Header: &h, Status: Running})
	if err != nil {
		return err
	}
	return publish(dir, filepath.Base(p.Log), func(w io.Writer) error {
		_, err := w.Write(append(line, '\n'))
		return err
	}, ErrExists)
}

// Append durably adds events, in order, to a running transcript: when it
// returns nil every event is on disk (fsynced). An id that was never created
// yields ErrNotFound, a finished transcript ErrFinished; neither writes, and
// both are recorded as the transcript missing events.
func (s *Store) Append(ctx context.Context, session, agent string, events ...Event) error {
	p, err := s.PathsFor(session, agent)
	if err == nil {
		err = s.append(p, events)
	}
	// ErrFinished is recorded like any other failure: the refused events
	// happened and are not in the transcript.
	if err == nil {
		// 'ok' was recorded at create and cannot change on success.
		return nil
	}
	return s.record(ctx, "append", session, agent, p.Transcript, err, nil)
}

func (s *Store) append(p Paths, events []Event) error {
	if len(events) == 0 {
		return nil
	}
	for _, e := range events {
		if err := normalize.Validate(e); err != nil {
			return err
		}
	}
	f, err := s.openLocked(p)
	if err != nil {
		return err
	}
	defer closeLocked(f)
	last, err := lastSeq(f)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	for i, e := range events {
		e.Seq = last + int64(i) + 1
		if e.At.IsZero() {
			e.At = s.now()
		}
		e.At = e.At.UTC()
		b, err := json.Marshal(logLine{Event: e})
		if err != nil {
			return err
		}
		if len(b) > MaxLine {
			// Readers refuse a longer line; it is never written.
			return fmt.Errorf("%w: %s event of %d bytes is longer than the %d-byte line limit", ErrInvalidEvent, e.Type, len(b), MaxLine)
		}
		buf.Write(b)
		buf.WriteByte('\n')
	}
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	// One write of whole lines: a crash can tear only the last line, which
	// readers ignore and the next append cuts off. A write or fsync that
	// fails (EFBIG, ENOSPC, EIO) may have left whole lines of the batch
	// behind; they are cut off again, so a failed append leaves none of its
	// events for readers to see or the caller's retry to duplicate.
	// The batch goes at the end explicitly (the lock excludes every other
	// writer); see openLocked for why the log is not opened O_APPEND.
	if _, err := f.WriteAt(buf.Bytes(), fi.Size()); err != nil {
		return undoAppend(f, fi.Size(), fmt.Errorf("append to %s: %w", p.Log, err))
	}
	if err := f.Sync(); err != nil {
		return undoAppend(f, fi.Size(), fmt.Errorf("fsync %s: %w", p.Log, err))
	}
	return nil
}

// End is a transcript's terminal record.
type End struct {
	Status Status
	// Error is the failure detail (failed, cancelled, timed_out).
	Error string
	// Model is the model the provider stream reported. It is recorded, in
	// the document and in the lifecycle row, only where the host gave none
	// (Header.Model empty, the row's model NULL).
	Model string
	// At is the end time; zero means now.
	At time.Time
}

// Finish marks the transcript terminal, exactly once: it publishes the
// readable document atomically, after which the transcript is immutable. A
// second Finish (from any process) changes nothing and returns ErrFinished.
// The document is written as the log is read, one event at a time. A
// cancelled ctx stops that (nothing published, the context's error
// returned); ctx's deadline bounds only the lifecycle writes.
func (s *Store) Finish(ctx context.Context, session, agent string, end End) error {
	if end.At.IsZero() {
		end.At = s.now()
	}
	end.At = end.At.UTC()
	if !end.Status.Terminal() {
		return fmt.Errorf("transcript: finish with non-terminal status %q", end.Status)
	}
	p, err := s.PathsFor(session, agent)
	if err == nil {
		err = s.finish(ctx, p, end)
	}
	if errors.Is(err, ErrFinished) {
		// The row of a finished transcript may still be running: its
		// finisher died, or its lifecycle write failed, after the document
		// was published. A retry carries the document's terminal record over.
		if s.life != nil {
			if lerr := s.endRowAsDocument(ctx, p, session, agent); lerr != nil {
				return errors.Join(err, fmt.Errorf("%w: %v", ErrLifecycle, lerr))
			}
		}
		return err
	}
	return s.record(ctx, "finish", session, agent, p.Transcript, err, func(l *Lifecycle) error {
		_, err := l.end(ctx, Identity{WorkspacePath: s.workspace, SessionID: session, AgentID: agent}, end.Status, end.At, end.Error, end.Model)
		return err
	})
}

// finish streams the log into the document: one pass plans the rendering,
// a second writes each event as it is read, so memory follows the largest
// event, never the transcript's size. The passes stop when ctx is cancelled
// (nothing is published; the log stays as it was), but not at ctx's
// deadline: that bounds the lifecycle writes, and a document takes as long
// to write as its transcript is big.
func (s *Store) finish(ctx context.Context, p Paths, end End) error {
	ctx, stop := cancelOnly(ctx)
	defer stop()
	f, err := s.openLocked(p)
	if err != nil {
		return err
	}
	defer closeLocked(f)
	t, plan, logEnd, err := planLog(ctx, io.NewSectionReader(f, 0, 1<<62), p.Log)
	if err != nil {
		return err
	}
	t.Status, t.Error = end.Status, end.Error
	if t.Model == "" {
		t.Model = end.Model
	}
	at := end.At
	t.EndedAt = &at
	return publish(filepath.Dir(p.Transcript), filepath.Base(p.Transcript), func(w io.Writer) error {
		return writeDocument(w, t, func(fn func(Event) error) error { return plan.each(ctx, f, logEnd, fn) })
	}, ErrFinished)
}

// cancelOnly is a context done when ctx is cancelled, not when its
// deadline passes.
func cancelOnly(ctx context.Context) (context.Context, context.CancelFunc) {
	c, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	if errors.Is(ctx.Err(), context.Canceled) {
		cancel(context.Canceled) // at once: AfterFunc's call would come later
	}
	stop := context.AfterFunc(ctx, func() {
		if errors.Is(ctx.Err(), context.Canceled) {
			cancel(context.Canceled)
		}
	})
	return c, func() { stop(); cancel(nil) }
}

// endRowAsDocument ends the lifecycle row of a finished transcript as the
// document ended, if the row is not terminal yet.
func (s *Store) endRowAsDocument(ctx context.Context, p Paths, session, agent string) error {
	r, err := open(ctx, p)
	if err != nil {
		return err
	}
	defer r.Close()
	_, err = endRow(ctx, s.life, Identity{WorkspacePath: s.workspace, SessionID: session, AgentID: agent}, r.Summary())
	return err
}

// endRow moves a non-terminal lifecycle row to the finished transcript t's
// terminal status, end time and error; a terminal row is left alone.
func endRow(ctx context.Context, l *Lifecycle, id Identity, t *Transcript) (bool, error) {
	if !t.Status.Terminal() || t.EndedAt == nil {
		return false, nil
	}
	return l.end(ctx, id, t.Status, *t.EndedAt, t.Error, t.Model)
}

// record writes the outcome of op into background_agent_log when the store
// has a lifecycle: first the lifecycle fields (fn, may be nil), then
// transcript_path and transcript_status. It returns opErr, joined with
// ErrLifecycle when the record itself failed.
func (s *Store) record(ctx context.Context, op, session, agent, path string, opErr error, fn func(*Lifecycle) error) error {
	if s.life == nil {
		return opErr
	}
	var errs []error
	if fn != nil {
		if err := fn(s.life); err != nil {
			errs = append(errs, err)
		}
	}
	id := Identity{WorkspacePath: s.workspace, SessionID: session, AgentID: agent}
	if err := s.life.RecordTranscript(ctx, id, path, statusText(op, opErr)); err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		return opErr
	}
	lerr := fmt.Errorf("%w: %v", ErrLifecycle, errors.Join(errs...))
	if opErr == nil {
		return lerr
	}
	return errors.Join(opErr, lerr)
}

// statusText is the transcript_status value for an operation's outcome.
func statusText(op string, err error) string {
	if err == nil {
		return "ok"
	}
	return "error: " + op + ": " + err.Error()
}
