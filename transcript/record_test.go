package transcript_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/transcript"
)

// recording is the Recording of a Claude child with fixture's stream.
func recording(t *testing.T, agent string, stream io.Reader) transcript.Recording {
	t.Helper()
	h := header("sess-rec", agent, transcript.KindRunInBackground)
	h.Provider, h.Model = transcript.ProviderClaude, ""
	return transcript.Recording{Header: h, Stream: stream}
}

// A whole provider stream becomes the transcript: the host's prompt first,
// then exactly the events the provider's normalizer reads from the stream,
// finished with the provider's outcome and the model the stream reported —
// in the document and in the lifecycle row, which ends as the document did.
func TestRecord_StreamBecomesTheTranscriptAndItsRow(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		l, s := lifecycleStore(t, db)
		r := recording(t, "agent-ok", fixture(t, "claude_success.jsonl"))
		r.Prompt = "Count the Go files under ./keys."
		res, err := transcript.Record(ctx, s, r)
		require.NoError(t, err)
		require.Equal(t, transcript.Completed, res.End.Status)
		require.Positive(t, res.Outcome.Records)
		require.False(t, res.Lost)
		require.True(t, res.Finished)

		want, out, err := transcript.Normalize(transcript.ProviderClaude, fixture(t, "claude_success.jsonl"))
		require.NoError(t, err)
		direct := newStore(t)
		require.NoError(t, direct.Create(ctx, r.Header))
		require.NoError(t, direct.Append(ctx, "sess-rec", "agent-ok", append([]transcript.Event{msg(transcript.UserMessage, r.Prompt)}, want...)...))
		require.NoError(t, direct.Finish(ctx, "sess-rec", "agent-ok", transcript.End{Status: out.Status, Model: out.Model}))
		expected, err := direct.Load("sess-rec", "agent-ok")
		require.NoError(t, err)

		tr, err := transcript.LoadPath(res.Paths.Transcript)
		require.NoError(t, err)
		require.Equal(t, res.Paths.Transcript, tr.Path)
		require.Equal(t, transcript.Completed, tr.Status)
		require.Equal(t, out.Model, tr.Model)
		require.NotEmpty(t, out.Model)
		require.Equal(t, expected.LastSeq, tr.LastSeq)
		require.Equal(t, eventRows(expected), eventRows(tr))
		require.Equal(t, expected.FinalResponse(), tr.FinalResponse())

		row, err := l.Get(ctx, transcript.Identity{WorkspacePath: "/ws", SessionID: "sess-rec", AgentID: "agent-ok"})
		require.NoError(t, err)
		require.Equal(t, "completed", row.Status)
		require.Equal(t, "ok", row.TranscriptStatus)
		require.Equal(t, out.Model, row.Model)
		require.NotNil(t, row.CompletedAt)
		require.WithinDuration(t, *tr.EndedAt, *row.CompletedAt, time.Millisecond)
	})
}

// ctx stops the reading of a stream that stays open, at once, and never a
// write: the finish runs although ctx is done when it runs, so the document
// and the row end together — cancelled by a cancel, timed_out by a deadline,
// with the cause the caller gave in the error text — and a run the provider
// had already reported completed stays completed.
func TestRecord_StopEndsTheReadingNeverAWrite(t *testing.T) {
	lines := fixtureLines(t, "claude_success.jsonl")
	for _, c := range []struct {
		name   string
		feed   int  // lines written before the stop
		expire bool // a deadline stops it, not a cancel
		status transcript.Status
		text   string
	}{
		{"cancel", 2, false, transcript.Cancelled, "cancelled: the recording was stopped before the provider stream ended (the host cancelled it) (the stream so far: claude stream ended without a terminal record)"},
		{"deadline", 2, true, transcript.TimedOut, "timed out: the child ran out of time"},
		{"after completion", len(lines), false, transcript.Completed, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
				l, s := lifecycleStore(t, db)
				pr, pw := io.Pipe()
				t.Cleanup(func() { pw.Close() })
				rctx, cancel := context.WithCancelCause(ctx)
				defer cancel(nil)
				if c.expire {
					var cancelT context.CancelFunc
					rctx, cancelT = context.WithTimeoutCause(rctx, 300*time.Millisecond, errors.New("the child ran out of time"))
					defer cancelT()
				}
				type done struct {
					res transcript.RecordResult
					err error
				}
				finished := make(chan done, 1)
				n, err := transcript.NewNormalizer(transcript.ProviderClaude)
				require.NoError(t, err)
				counted := &counting{Normalizer: n}
				r := recording(t, "agent-stop", pr)
				r.Normalizer = counted
				go func() {
					res, err := transcript.Record(rctx, s, r)
					finished <- done{res, err}
				}()
				if !c.expire {
					for _, line := range lines[:c.feed] {
						_, err := io.WriteString(pw, line+"\n")
						require.NoError(t, err)
					}
					// Every line written has been fed to the normalizer (and
					// its events appended) before the stop.
					require.Eventually(t, func() bool { return counted.fed.Load() == int64(c.feed) }, 20*time.Second, time.Millisecond)
					cancel(errors.New("the host cancelled it"))
				}
				var d done
				select {
				case d = <-finished:
				case <-time.After(20 * time.Second):
					t.Fatal("Record did not return after the stop while its stream stayed open")
				}
				require.NoError(t, d.err)
				require.Equal(t, c.status, d.res.End.Status)
				tr, err := transcript.LoadPath(d.res.Paths.Transcript)
				require.NoError(t, err)
				require.Equal(t, c.status, tr.Status)
				if c.text != "" {
					require.Equal(t, c.text, tr.Error)
				}
				row, err := l.Get(ctx, transcript.Identity{WorkspacePath: "/ws", SessionID: "sess-rec", AgentID: "agent-stop"})
				require.NoError(t, err)
				require.Equal(t, string(c.status), row.Status, "the row's end ran although ctx was done")
				require.Equal(t, tr.Error, row.Error)
				require.Equal(t, "ok", row.TranscriptStatus)
			})
		})
	}
}

// A stream none of whose lines is the provider's is Record's error
// (ErrNoRecords), and the transcript it keeps ends failed saying how many
// lines were ignored. A stream that cannot be read is the child's outcome:
// the transcript ends failed, and Record itself succeeded.
func TestRecord_NoProviderLineIsAnErrorAnUnreadableStreamIsTheOutcome(t *testing.T) {
	s := newStore(t)
	r := recording(t, "agent-none", strings.NewReader("plain text\nmore text\n"))
	res, err := transcript.Record(ctx, s, r)
	require.ErrorIs(t, err, transcript.ErrNoRecords)
	require.Contains(t, err.Error(), "2 line(s) ignored")
	tr, lerr := transcript.LoadPath(res.Paths.Transcript)
	require.NoError(t, lerr)
	require.Equal(t, transcript.Failed, tr.Status)
	require.Contains(t, tr.Error, "2 line(s) ignored")
	require.False(t, res.Lost)

	broken := io.MultiReader(strings.NewReader(fixtureLines(t, "claude_success.jsonl")[0]+"\n"), iotestErrReader{})
	res, err = transcript.Record(ctx, s, recording(t, "agent-broken", broken))
	require.NoError(t, err)
	require.Equal(t, transcript.Failed, res.End.Status)
	require.Equal(t, "reading the provider stream: the pipe broke", res.End.Error)
	tr, lerr = transcript.LoadPath(res.Paths.Transcript)
	require.NoError(t, lerr)
	require.Equal(t, res.End.Error, tr.Error)
}

type iotestErrReader struct{}

func (iotestErrReader) Read([]byte) (int, error) { return 0, errors.New("the pipe broke") }

// Create's refusals return at once, nothing written: an id that cannot be a
// path component (ErrInvalidID), and a transcript already there
// (ErrExists), which is left byte for byte as it was.
func TestRecord_RefusedCreateWritesNothing(t *testing.T) {
	s := newStore(t)
	r := recording(t, "../escape", strings.NewReader(""))
	_, err := transcript.Record(ctx, s, r)
	require.ErrorIs(t, err, transcript.ErrInvalidID)
	_, statErr := os.Stat(filepath.Join(s.Root(), "background"))
	require.ErrorIs(t, statErr, os.ErrNotExist)

	res, err := transcript.Record(ctx, s, recording(t, "agent-once", fixture(t, "claude_success.jsonl")))
	require.NoError(t, err)
	before, err := os.ReadFile(res.Paths.Transcript)
	require.NoError(t, err)
	_, err = transcript.Record(ctx, s, recording(t, "agent-once", fixture(t, "claude_failure.jsonl")))
	require.ErrorIs(t, err, transcript.ErrExists)
	after, err := os.ReadFile(res.Paths.Transcript)
	require.NoError(t, err)
	require.Equal(t, before, after)
}

// A transcript write that fails does not stop the recording: the lifecycle
// row still reaches the provider's outcome, Record reports each failure, and
// the result says what is on disk — nothing (Lost), or a finished transcript
// missing the events whose append failed (Lost and Finished).
func TestRecord_FailedWritesAreReportedAndTheRowStillEnds(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		l, s := unwritableStore(t, db)
		res, err := transcript.Record(ctx, s, recording(t, "agent-unwritten", fixture(t, "claude_success.jsonl")))
		require.Error(t, err)
		require.Contains(t, err.Error(), "not a directory")
		require.GreaterOrEqual(t, len(err.(interface{ Unwrap() []error }).Unwrap()), 3, "create, the appends, finish: each failure on its own")
		require.True(t, res.Lost)
		require.False(t, res.Finished)
		row, err := l.Get(ctx, transcript.Identity{WorkspacePath: "/ws", SessionID: "sess-rec", AgentID: "agent-unwritten"})
		require.NoError(t, err)
		require.Equal(t, "completed", row.Status)
		require.True(t, strings.HasPrefix(row.TranscriptStatus, "error: create: "), row.TranscriptStatus)

		// One append fails (its log is briefly a directory), the rest
		// succeed: the document is published without that record's events.
		s = newStore(t, transcript.WithLifecycle(l, "/ws"))
		p, _ := s.PathsFor("sess-rec", "agent-incomplete")
		n, err := transcript.NewNormalizer(transcript.ProviderClaude)
		require.NoError(t, err)
		r := recording(t, "agent-incomplete", fixture(t, "claude_success.jsonl"))
		r.Normalizer = &sabotage{Normalizer: n, at: 2, log: p.Log, t: t}
		res, err = transcript.Record(ctx, s, r)
		require.Error(t, err)
		require.Contains(t, err.Error(), "is a directory")
		require.True(t, res.Lost)
		require.True(t, res.Finished)
		tr, err := transcript.LoadPath(res.Paths.Transcript)
		require.NoError(t, err)
		require.Equal(t, transcript.Completed, tr.Status)
		row, err = l.Get(ctx, transcript.Identity{WorkspacePath: "/ws", SessionID: "sess-rec", AgentID: "agent-incomplete"})
		require.NoError(t, err)
		require.Equal(t, "completed", row.Status)
		require.True(t, strings.HasPrefix(row.TranscriptStatus, "error: append: "), row.TranscriptStatus)
	})
}

// sabotage replaces the log by a directory while the record at line `at`
// is appended (the append fails with EISDIR), and puts it back at the next.
type sabotage struct {
	transcript.Normalizer
	at, line int
	log      string
	t        *testing.T
}

func (s *sabotage) Feed(b []byte) ([]transcript.Event, error) {
	s.line++
	switch s.line {
	case s.at:
		require.NoError(s.t, os.Rename(s.log, s.log+".saved"))
		require.NoError(s.t, os.Mkdir(s.log, 0o755))
	case s.at + 1:
		require.NoError(s.t, os.Remove(s.log))
		require.NoError(s.t, os.Rename(s.log+".saved", s.log))
	}
	evs, err := s.Normalizer.Feed(b)
	if s.line == s.at && len(evs) == 0 {
		s.t.Fatalf("line %d of the fixture yields no event: choose another", s.at)
	}
	return evs, err
}

// counting counts the records fed to its normalizer, once each is read.
type counting struct {
	transcript.Normalizer
	fed atomic.Int64
}

func (c *counting) Feed(b []byte) ([]transcript.Event, error) {
	defer c.fed.Add(1)
	return c.Normalizer.Feed(b)
}
