package transcript_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/transcript"
)

// Recover running while a child is being created — its lifecycle row not yet
// written — must not finish the live child's transcript as "interrupted": the
// execution is alive from the moment its transcript exists. Otherwise every
// later append and the child's own finish are refused, its lifecycle row stays
// 'running' for ever, and transcript_status still says 'ok'.
func TestTranscript_RecoverDuringCreateLeavesTheLiveChildAlone(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		l, s := lifecycleStore(t, db)
		root := s.Root()
		p, _ := s.PathsFor("sess-cr", "agent-cr")

		release := db.LockWrites(t, "background_agent_log")
		created := make(chan error, 1)
		go func() { created <- s.Create(ctx, header("sess-cr", "agent-cr", transcript.KindRunInBackground)) }()
		if db.Dialect == dialect.Postgres {
			// Create waits on the lock: whatever it does before its row
			// insert (the right order: nothing) has been done.
			require.Eventually(t, func() bool {
				var n int
				require.NoError(t, db.DB.QueryRow(`SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database()
					AND wait_event_type = 'Lock' AND query LIKE 'INSERT INTO background_agent_log%'`).Scan(&n))
				return n > 0
			}, 20*time.Second, 2*time.Millisecond, "Create's row insert waits on the lock")
		} else {
			// SQLite's busy wait is invisible to another connection: give
			// Create 500 ms to get as far as it can while the table is locked.
			deadline := time.Now().Add(500 * time.Millisecond)
			for time.Now().Before(deadline) {
				if _, err := os.Stat(p.Log); err == nil {
					break
				}
				time.Sleep(time.Millisecond)
			}
		}
		rep, err := transcript.Recover(ctx, root, l, "")
		require.NoError(t, err)
		release()
		require.NoError(t, <-created)
		require.Empty(t, rep.Finished, "recover finished a child that was being created")

		require.NoError(t, s.Append(ctx, "sess-cr", "agent-cr", msg(transcript.UserMessage, "work"), msg(transcript.AssistantMessage, "done")))
		require.NoError(t, s.Finish(ctx, "sess-cr", "agent-cr", transcript.End{Status: transcript.Completed}))
		tr, err := s.Load("sess-cr", "agent-cr")
		require.NoError(t, err)
		require.Equal(t, transcript.Completed, tr.Status)
		require.Equal(t, []string{"work", "done"}, texts(tr))
		e, err := l.Get(ctx, transcript.Identity{WorkspacePath: "/ws", SessionID: "sess-cr", AgentID: "agent-cr"})
		require.NoError(t, err)
		require.Equal(t, "completed", e.Status)
		require.Equal(t, "ok", e.TranscriptStatus)
	})
}

// refuseStatusChange makes every change of background_agent_log.status fail
// (a trigger that raises) until the returned func drops it.
func refuseStatusChange(t *testing.T, db *dbtest.DB) func() {
	t.Helper()
	if db.Dialect == dialect.Postgres {
		db.Exec(t, `CREATE FUNCTION refuse_status() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN RAISE EXCEPTION 'lifecycle store refused the status change'; END $$;
			CREATE TRIGGER refuse_status BEFORE UPDATE OF status ON background_agent_log
			FOR EACH ROW EXECUTE FUNCTION refuse_status();`)
		return func() {
			db.Exec(t, `DROP TRIGGER refuse_status ON background_agent_log; DROP FUNCTION refuse_status();`)
		}
	}
	db.Exec(t, `CREATE TRIGGER refuse_status BEFORE UPDATE OF status ON background_agent_log
		BEGIN SELECT RAISE(ABORT, 'lifecycle store refused the status change'); END;`)
	return func() { db.Exec(t, `DROP TRIGGER refuse_status`) }
}

// The lifecycle write failing after the document was published: Finish
// reports ErrLifecycle, and the host's retry — once the database accepts
// writes again — must end the row as the transcript ended, not leave it
// 'running' behind an "already finished".
func TestTranscript_FinishRetryEndsTheRowAfterALifecycleFailure(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		l, s := lifecycleStore(t, db)
		require.NoError(t, s.Create(ctx, header("sess-rt", "agent-rt", transcript.KindTodoDelegate)))
		id := transcript.Identity{WorkspacePath: "/ws", SessionID: "sess-rt", AgentID: "agent-rt"}

		allow := refuseStatusChange(t, db)
		err := s.Finish(ctx, "sess-rt", "agent-rt", transcript.End{Status: transcript.TimedOut, Error: "deadline 10m"})
		require.ErrorIs(t, err, transcript.ErrLifecycle)
		require.ErrorContains(t, err, "refused the status change")
		e, err := l.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, "running", e.Status)
		allow()

		require.ErrorIs(t, s.Finish(ctx, "sess-rt", "agent-rt", transcript.End{Status: transcript.TimedOut, Error: "deadline 10m"}), transcript.ErrFinished)
		tr, err := s.Load("sess-rt", "agent-rt")
		require.NoError(t, err)
		e, err = l.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, "timed_out", e.Status)
		require.Equal(t, "deadline 10m", e.Error)
		require.Equal(t, tr.EndedAt.Truncate(time.Microsecond), *e.CompletedAt)
		require.Equal(t, "ok", e.TranscriptStatus)
	})
}

// Provider output is not always clean text: a failure detail (a tool's
// stderr, a provider error) or a model name may carry NUL or bytes that are
// not UTF-8. PostgreSQL refuses both in a text column, so such a value must
// not keep the lifecycle row from reaching its terminal status or the
// outcome from being recorded. The transcript document keeps the text as
// JSON can carry it.
func TestTranscript_NULAndInvalidUTF8ReachTheLifecycleRow(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		l, s := lifecycleStore(t, db)
		h := header("sess-nul", "agent-nul", transcript.KindRunInBackground)
		h.Model = "model\x00x"
		require.NoError(t, s.Create(ctx, h))
		id := transcript.Identity{WorkspacePath: "/ws", SessionID: "sess-nul", AgentID: "agent-nul"}
		e, err := l.Get(ctx, id)
		require.NoError(t, err)
		require.NotNil(t, e, "the row was not written")
		require.Equal(t, `model\x00x`, e.Model)

		errText := "exit status 2: \x00\xff\xfe binary stderr"
		require.NoError(t, s.Finish(ctx, "sess-nul", "agent-nul", transcript.End{Status: transcript.Failed, Error: errText}))
		e, err = l.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, "failed", e.Status)
		require.Equal(t, `exit status 2: \x00\xff\xfe binary stderr`, e.Error)
		require.Equal(t, "ok", e.TranscriptStatus)

		tr, err := s.Load("sess-nul", "agent-nul")
		require.NoError(t, err)
		require.Equal(t, transcript.Failed, tr.Status)
		require.Equal(t, "exit status 2: \x00\ufffd\ufffd binary stderr", tr.Error)
	})
}

// An id that is not UTF-8 is a valid Linux file name, but JSON cannot carry
// it: the header would name the agent "agent-\ufffd" while the file is
// "agent-\xff", so the transcript's identity would differ from its place, and
// two such ids would render alike. It is refused like any other id that
// cannot be one path component.
func TestTranscript_NonUTF8IDIsRefused(t *testing.T) {
	s := newStore(t)
	for _, c := range []struct{ session, agent, want string }{
		{"sess", "agent-\xff", `agent id "agent-\xff"`},
		{"sess-\xc3", "agent", `session id "sess-\xc3"`},
	} {
		err := s.Create(ctx, header(c.session, c.agent, transcript.KindRunInBackground))
		require.ErrorIs(t, err, transcript.ErrInvalidID)
		require.ErrorContains(t, err, c.want)
		require.ErrorContains(t, err, "UTF-8")
	}
	_, err := os.Stat(s.Root())
	require.True(t, os.IsNotExist(err), "nothing may be created for an invalid id")
}

// An event that arrives after the transcript's terminal record (an
// asynchronous event path racing the finish, or a child still running after
// recover finished it) is refused and therefore missing from the transcript:
// the lifecycle row must not go on saying the transcript is 'ok'.
func TestTranscript_AppendAfterFinishIsRecordedAsMissing(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		l, s := lifecycleStore(t, db)
		require.NoError(t, s.Create(ctx, header("sess-late", "agent-late", transcript.KindRunInBackground)))
		require.NoError(t, s.Finish(ctx, "sess-late", "agent-late", transcript.End{Status: transcript.Completed}))
		err := s.Append(ctx, "sess-late", "agent-late", call("toolu_late", "Bash", `{"command":"true"}`))
		require.ErrorIs(t, err, transcript.ErrFinished)
		require.NotErrorIs(t, err, transcript.ErrLifecycle)

		e, err := l.Get(ctx, transcript.Identity{WorkspacePath: "/ws", SessionID: "sess-late", AgentID: "agent-late"})
		require.NoError(t, err)
		require.Equal(t, "completed", e.Status)
		require.True(t, strings.HasPrefix(e.TranscriptStatus, "error: append: "), e.TranscriptStatus)
		require.Contains(t, e.TranscriptStatus, "already finished")
		// A second finish is not a lost event: nothing more is recorded.
		require.ErrorIs(t, s.Finish(ctx, "sess-late", "agent-late", transcript.End{Status: transcript.Completed}), transcript.ErrFinished)
	})
}

// A lifecycle row with no transcript anywhere and nothing recorded about one
// — the process died between writing the row and linking the transcript, or
// the host wrote its row and never created one — is a background execution
// without durable evidence. ls must say so, not list it as fine.
func TestTranscript_IndexNamesARowWithoutAnyTranscript(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		l, s := lifecycleStore(t, db)
		require.NoError(t, l.Start(ctx, transcript.Entry{WorkspacePath: "/ws", SessionID: "sess-nt", AgentID: "agent-nt",
			Kind: "run_in_background", StartedAt: time.Now()}))
		_, err := l.End(ctx, transcript.Identity{WorkspacePath: "/ws", SessionID: "sess-nt", AgentID: "agent-nt"}, transcript.Completed, time.Now(), "")
		require.NoError(t, err)

		idx, err := transcript.Index(ctx, s, l, "", "sess-nt")
		require.NoError(t, err)
		require.Len(t, idx, 1)
		require.Nil(t, idx[0].Transcript)
		require.Len(t, idx[0].Problems, 1)
		require.Contains(t, idx[0].Problems[0], "no transcript")
	})
}

// show PATH with the log of an agent whose id ends in ".json" must read that
// agent's transcript, not the one of the id without the suffix.
func TestTranscript_LoadPathOfAnAgentIDEndingInJSON(t *testing.T) {
	s := newStore(t)
	for _, a := range []string{"report", "report.json"} {
		require.NoError(t, s.Create(ctx, header("sess-lp", a, transcript.KindRunInBackground)))
		require.NoError(t, s.Append(ctx, "sess-lp", a, msg(transcript.UserMessage, "prompt of "+a)))
	}
	require.NoError(t, s.Finish(ctx, "sess-lp", "report", transcript.End{Status: transcript.Completed}))
	p, _ := s.PathsFor("sess-lp", "report.json")
	for _, path := range []string{p.Log, p.Transcript} {
		tr, err := transcript.LoadPath(path)
		require.NoError(t, err, path)
		require.Equal(t, "report.json", tr.AgentID, path)
		require.Equal(t, []string{"prompt of report.json"}, texts(tr))
	}
}

// An outcome recorded against no row at all — the finisher names the
// workspace differently from the creator ("/ws/" for "/ws"), or the row was
// never written — must not pass for recorded: the UPDATE matches nothing, the
// creator's row stays 'running' for ever, and Finish returned nil.
func TestTranscript_RecordingAgainstNoRowIsReported(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		l := lifecycleDB(t, db)
		root := filepath.Join(t.TempDir(), "conversation")
		creator, err := transcript.NewStore(root, transcript.WithLifecycle(l, "/ws"))
		require.NoError(t, err)
		finisher, err := transcript.NewStore(root, transcript.WithLifecycle(l, "/ws/"))
		require.NoError(t, err)
		require.NoError(t, creator.Create(ctx, header("sess-nr", "agent-nr", transcript.KindRunInBackground)))

		err = finisher.Finish(ctx, "sess-nr", "agent-nr", transcript.End{Status: transcript.Completed})
		require.ErrorIs(t, err, transcript.ErrLifecycle)
		require.ErrorContains(t, err, `no background_agent_log row for workspace "/ws/" session "sess-nr" agent "agent-nr"`)
		tr, err := creator.Load("sess-nr", "agent-nr")
		require.NoError(t, err)
		require.Equal(t, transcript.Completed, tr.Status, "the file operation stands")
	})
}

// A Create refused for its ids (or its header) writes nothing: no lifecycle
// row left 'running' for ever with an error no Recover would ever see.
func TestTranscript_CreateWithInvalidIDWritesNoRow(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		_, s := lifecycleStore(t, db)
		root := s.Root()
		for _, h := range []transcript.Header{
			header("sess", "../../x", transcript.KindRunInBackground),
			header("..", "agent", transcript.KindRunInBackground),
			header("sess", strings.Repeat("a", 300), transcript.KindRunInBackground),
		} {
			require.ErrorIs(t, s.Create(ctx, h), transcript.ErrInvalidID)
		}
		require.ErrorIs(t, s.Create(ctx, header("sess", "agent", "")), transcript.ErrInvalidEvent)
		var n int
		require.NoError(t, db.QueryRow(`SELECT COUNT(*) FROM background_agent_log`).Scan(&n))
		require.Zero(t, n)
		_, err := os.Stat(root)
		require.True(t, os.IsNotExist(err))
	})
}

// The model a stream reports fills in a model the host did not give, in the
// document and the row, and never replaces one it gave.
func TestTranscript_FinishRecordsTheStreamsModelOnlyWhereNoneWasGiven(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		l := lifecycleDB(t, db)
		s, err := transcript.NewStore(t.TempDir(), transcript.WithLifecycle(l, "/ws"))
		require.NoError(t, err)
		given := header("sess-m", "given", transcript.KindRunInBackground)
		none := header("sess-m", "none", transcript.KindRunInBackground)
		none.Model = ""
		for _, h := range []transcript.Header{given, none} {
			require.NoError(t, s.Create(ctx, h))
			require.NoError(t, s.Finish(ctx, h.ParentSessionID, h.AgentID, transcript.End{Status: transcript.Completed, Model: "stream-model"}))
		}
		for agent, want := range map[string]string{"given": given.Model, "none": "stream-model"} {
			tr, err := s.Load("sess-m", agent)
			require.NoError(t, err)
			require.Equal(t, want, tr.Model, agent)
			e, err := l.Get(ctx, transcript.Identity{WorkspacePath: "/ws", SessionID: "sess-m", AgentID: agent})
			require.NoError(t, err)
			require.Equal(t, want, e.Model, agent)
		}
	})
}
