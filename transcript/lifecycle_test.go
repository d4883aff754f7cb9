package transcript_test

import (
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/instant"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/internal/tool/fixtures"
	"github.com/schemastate/schemastate/reconcile"
	"github.com/schemastate/schemastate/transcript"
)

func legacyLifecycleFixture(t *testing.T, db *dbtest.DB) {
	t.Helper()
	script, err := fixtures.LifecycleLegacyFixture(string(db.Dialect))
	require.NoError(t, err)
	db.Exec(t, script)
}

// storageID names the table's physical storage: SQLite's rootpage, or
// PostgreSQL's relfilenode. A rebuild (or a rewriting ALTER) changes it.
func storageID(t *testing.T, db *dbtest.DB) int64 {
	t.Helper()
	q := `SELECT rootpage FROM sqlite_master WHERE type = 'table' AND name = 'background_agent_log'`
	if db.Dialect == dialect.Postgres {
		q = `SELECT relfilenode FROM pg_class WHERE oid = 'background_agent_log'::regclass`
	}
	var id int64
	require.NoError(t, db.QueryRow(q).Scan(&id))
	return id
}

var legacyColumns = []string{"workspace_path", "session_id", "agent_id", "execution_id", "kind", "provider",
	"model", "status", "started_at", "completed_at", "error"}

// rowsAsText reads every row of the pre-existing columns as stored text.
func rowsAsText(t *testing.T, db *dbtest.DB) [][]sql.NullString {
	t.Helper()
	exprs := make([]string, len(legacyColumns))
	for i, c := range legacyColumns {
		exprs[i] = "CAST(" + c + " AS TEXT)"
	}
	return dbtest.TextRows(t, db.DB, `SELECT `+strings.Join(exprs, ", ")+` FROM background_agent_log ORDER BY agent_id`)
}

// An installation whose background_agent_log predates transcripts gets the
// two columns from a reconcile by ALTER TABLE: same physical table, every row
// byte-identical, the new columns NULL (nothing recorded, not "ok"), and a
// second reconcile runs no DDL.
func TestLifecycle_ReconcileAddsTranscriptColumnsWithoutRebuild(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		db.Host(t)
		legacyLifecycleFixture(t, db)
		at := time.Date(2026, 8, 21, 1, 39, 37, 271235000, time.UTC)
		for i, a := range []string{"agent-a", "agent-b", "agent-c"} {
			var completed, errText any
			if i > 0 {
				completed, errText = instant.RowTime(db.Dialect, at.Add(time.Minute)), nil
			}
			if i == 2 {
				errText = "Measurement Validator: failed"
			}
			_, err := db.DB.Exec(db.Q(`INSERT INTO background_agent_log (workspace_path, session_id, agent_id, execution_id, kind, provider, model, status, started_at, completed_at, error)
				VALUES ('/ws', 'schedule-cron--fba2d19b', ?, ?, 'scheduled', NULL, 'gpt-5', ?, ?, ?, ?)`),
				a, "exec-"+a, []string{"running", "completed", "failed"}[i], instant.RowTime(db.Dialect, at), completed, errText)
			require.NoError(t, err)
		}
		before, rootBefore := rowsAsText(t, db), storageID(t, db)

		rep, _ := reconcile.Reconcile(ctx, db.DB)
		shape := rep.Step(reconcile.StepShape)
		require.Equal(t, reconcile.Applied, shape.Status, shape.Detail)
		require.Contains(t, shape.Detail, "altered background_agent_log")
		require.NotContains(t, shape.Detail, "rebuilt background_agent_log")

		require.Equal(t, rootBefore, storageID(t, db), "the table was rebuilt")
		require.Equal(t, before, rowsAsText(t, db), "rows changed")
		var n int
		require.NoError(t, db.QueryRow(`SELECT COUNT(*) FROM background_agent_log WHERE transcript_path IS NULL AND transcript_status IS NULL`).Scan(&n))
		require.Equal(t, 3, n)

		rep, _ = reconcile.Reconcile(ctx, db.DB)
		require.Equal(t, reconcile.Unchanged, rep.Step(reconcile.StepShape).Status, rep.Step(reconcile.StepShape).Detail)
		require.Equal(t, rootBefore, storageID(t, db))

		// And the lifecycle API reads the old rows as they are.
		l, err := transcript.NewLifecycle(db.DB)
		require.NoError(t, err)
		es, err := l.List(ctx, "/ws", "schedule-cron--fba2d19b")
		require.NoError(t, err)
		require.Len(t, es, 3)
		require.Equal(t, at, es[0].StartedAt)
		require.True(t, es[0].Alive())
		require.False(t, es[2].Alive())
		require.Equal(t, "Measurement Validator: failed", es[2].Error)
		require.Empty(t, es[2].TranscriptStatus)
	})
}

func TestLifecycle_FreshDatabaseGetsTheDeclaredTable(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		lifecycleDB(t, db)
		_, err := db.DB.Exec(`SELECT workspace_path, session_id, agent_id, execution_id, kind, provider, model, status,
			started_at, completed_at, error, transcript_path, transcript_status FROM background_agent_log`)
		require.NoError(t, err)
	})
}

// Requirement 5 / requirement 4: every create, append and finish records its
// outcome; a successful life ends 'ok' with the path, and the lifecycle row
// carries the terminal status.
func TestLifecycle_OperationsRecordOKAndLifecycle(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		l, s := lifecycleStore(t, db)
		h := header("sess-1", "agent-1", transcript.KindTodoDelegate)
		require.NoError(t, s.Create(ctx, h))
		id := transcript.Identity{WorkspacePath: "/ws", SessionID: "sess-1", AgentID: "agent-1"}
		e, err := l.Get(ctx, id)
		require.NoError(t, err)
		p, _ := s.PathsFor("sess-1", "agent-1")
		require.Equal(t, "running", e.Status)
		require.Equal(t, "todo_delegate", e.Kind)
		require.Equal(t, "exec-agent-1", e.ExecutionID)
		require.Equal(t, h.StartedAt.Truncate(time.Microsecond), e.StartedAt)
		require.Equal(t, "ok", e.TranscriptStatus)
		require.Equal(t, p.Transcript, e.TranscriptPath)
		require.Nil(t, e.CompletedAt)

		require.NoError(t, s.Append(ctx, "sess-1", "agent-1", msg(transcript.UserMessage, "do it")))
		end := time.Date(2026, 8, 21, 10, 0, 0, 5000, time.UTC)
		require.NoError(t, s.Finish(ctx, "sess-1", "agent-1", transcript.End{Status: transcript.Cancelled, Error: "parent cancelled", At: end}))
		e, err = l.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, "cancelled", e.Status)
		require.Equal(t, "parent cancelled", e.Error)
		require.Equal(t, end, *e.CompletedAt)
		require.Equal(t, "ok", e.TranscriptStatus)

		// A second finish changes nothing, in the file or the row.
		require.ErrorIs(t, s.Finish(ctx, "sess-1", "agent-1", transcript.End{Status: transcript.Completed}), transcript.ErrFinished)
		again, err := l.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, e, again)
	})
}

// Requirement 5: a storage write failure is visible in transcript_status; the
// lifecycle still ends terminal, and a completed agent does not claim a
// transcript it does not have. The failure is real even as root: a path
// component of the storage root is a regular file (ENOTDIR).
func TestLifecycle_WriteFailureIsVisibleInTranscriptStatus(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		l, s := unwritableStore(t, db)

		err := s.Create(ctx, header("sess-w", "agent-w", transcript.KindRunInBackground))
		require.Error(t, err)
		require.NotErrorIs(t, err, transcript.ErrLifecycle, "the failure was recorded")
		require.Error(t, s.Append(ctx, "sess-w", "agent-w", msg(transcript.AssistantMessage, "lost")))
		require.Error(t, s.Finish(ctx, "sess-w", "agent-w", transcript.End{Status: transcript.Completed}))

		e, err := l.Get(ctx, transcript.Identity{WorkspacePath: "/ws", SessionID: "sess-w", AgentID: "agent-w"})
		require.NoError(t, err)
		require.Equal(t, "completed", e.Status, "the lifecycle is still recorded")
		require.True(t, strings.HasPrefix(e.TranscriptStatus, "error: create: "), e.TranscriptStatus)
		require.Contains(t, e.TranscriptStatus, "not a directory")
		require.Contains(t, e.TranscriptPath, filepath.Join("background", "sess-w", "agent-w.json"))
	})
}

// A failure after a good create (the log replaced by a directory: EISDIR, as
// root too) flips 'ok' to the error; later successes never flip it back.
func TestLifecycle_AppendFailureIsStickyInTranscriptStatus(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		l, s := lifecycleStore(t, db)
		require.NoError(t, s.Create(ctx, header("sess-s", "agent-s", transcript.KindRunInBackground)))
		p, _ := s.PathsFor("sess-s", "agent-s")
		saved := p.Log + ".saved"
		require.NoError(t, os.Rename(p.Log, saved))
		require.NoError(t, os.Mkdir(p.Log, 0o755))
		require.Error(t, s.Append(ctx, "sess-s", "agent-s", msg(transcript.AssistantMessage, "lost")))
		require.NoError(t, os.Remove(p.Log))
		require.NoError(t, os.Rename(saved, p.Log))
		require.NoError(t, s.Append(ctx, "sess-s", "agent-s", msg(transcript.AssistantMessage, "kept")))
		require.NoError(t, s.Finish(ctx, "sess-s", "agent-s", transcript.End{Status: transcript.Completed}))

		e, err := l.Get(ctx, transcript.Identity{WorkspacePath: "/ws", SessionID: "sess-s", AgentID: "agent-s"})
		require.NoError(t, err)
		require.Equal(t, "completed", e.Status)
		require.True(t, strings.HasPrefix(e.TranscriptStatus, "error: append: "), e.TranscriptStatus)
		require.Contains(t, e.TranscriptStatus, "is a directory")
	})
}

// The lifecycle write failing is reported (ErrLifecycle) while the file
// operation stands: the host learns that its diagnostics are incomplete.
func TestLifecycle_RecordFailureIsReported(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		_, s := lifecycleStore(t, db)
		_, err := db.DB.Exec(`DROP TABLE background_agent_log`)
		require.NoError(t, err)
		err = s.Create(ctx, header("sess-d", "agent-d", transcript.KindRunInBackground))
		require.ErrorIs(t, err, transcript.ErrLifecycle)
		tr, err := s.Load("sess-d", "agent-d")
		require.NoError(t, err)
		require.Equal(t, transcript.Running, tr.Status)
	})
}

// Recover finishes exactly the running transcripts whose execution is not
// alive per background_agent_log (row terminal, or no row), as failed with an
// "interrupted" reason, and leaves alive and finished ones alone.
func TestLifecycle_RecoverFinishesOnlyDeadRunningTranscripts(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		l, s := lifecycleStore(t, db)
		root := s.Root()
		plain, err := transcript.NewStore(root)
		require.NoError(t, err)
		for _, a := range []string{"agent-dead", "agent-alive", "agent-done"} {
			require.NoError(t, s.Create(ctx, header("sess-r", a, transcript.KindRunInBackground)))
			require.NoError(t, s.Append(ctx, "sess-r", a, msg(transcript.UserMessage, "work")))
		}
		require.NoError(t, plain.Create(ctx, header("sess-r", "agent-norow", transcript.KindScheduled)))
		require.NoError(t, s.Finish(ctx, "sess-r", "agent-done", transcript.End{Status: transcript.Completed}))
		// The host's lifecycle ended agent-dead (e.g. at boot after a crash)
		// without the transcript being finished.
		_, err = l.End(ctx, transcript.Identity{WorkspacePath: "/ws", SessionID: "sess-r", AgentID: "agent-dead"}, transcript.Failed, time.Now(), "server restarted")
		require.NoError(t, err)

		rep, err := transcript.Recover(ctx, root, l, "")
		require.NoError(t, err)
		require.Empty(t, rep.Problems)
		require.Len(t, rep.Finished, 2)
		require.Equal(t, "agent-dead", rep.Finished[0].AgentID)
		require.Equal(t, "failed", rep.Finished[0].Lifecycle)
		require.Equal(t, "agent-norow", rep.Finished[1].AgentID)
		require.Equal(t, "missing", rep.Finished[1].Lifecycle)
		require.Len(t, rep.Alive, 1)
		require.Equal(t, "agent-alive", rep.Alive[0].AgentID)

		for _, a := range []string{"agent-dead", "agent-norow"} {
			tr, err := s.Load("sess-r", a)
			require.NoError(t, err)
			require.Equal(t, transcript.Failed, tr.Status)
			require.True(t, strings.HasPrefix(tr.Error, "interrupted: "), tr.Error)
		}
		tr, err := s.Load("sess-r", "agent-dead")
		require.NoError(t, err)
		require.Contains(t, tr.Error, `error="server restarted"`)
		require.Equal(t, []string{"work"}, texts(tr))
		tr, err = s.Load("sess-r", "agent-alive")
		require.NoError(t, err)
		require.Equal(t, transcript.Running, tr.Status)
		tr, err = s.Load("sess-r", "agent-done")
		require.NoError(t, err)
		require.Equal(t, transcript.Completed, tr.Status)

		e, err := l.Get(ctx, transcript.Identity{WorkspacePath: "/ws", SessionID: "sess-r", AgentID: "agent-dead"})
		require.NoError(t, err)
		require.Equal(t, "failed", e.Status)
		require.Equal(t, "server restarted", e.Error)
		require.True(t, strings.HasPrefix(e.TranscriptStatus, "error: recover: interrupted: "), e.TranscriptStatus)

		rep, err = transcript.Recover(ctx, root, l, "")
		require.NoError(t, err)
		require.Empty(t, rep.Finished, "a second recover finds nothing")

		// A workspace filter that names no row makes every running
		// transcript's execution "missing" there: alive is per workspace.
		rep, err = transcript.Recover(ctx, root, l, "/other-ws")
		require.NoError(t, err)
		require.Len(t, rep.Finished, 1)
		require.Equal(t, "agent-alive", rep.Finished[0].AgentID)
	})
}

// Recover's reason names a transcript's rows in workspace order, whatever
// order they were written in, so `transcript recover` prints the same text
// at every run.
func TestLifecycle_RecoverNamesRowsInWorkspaceOrder(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		l := lifecycleDB(t, db)
		s, _ := created(t, "sess-o", "agent-o", transcript.KindRunInBackground)
		for _, e := range []struct{ ws, status string }{{"/ws-b", "completed"}, {"/ws-a", "failed"}} {
			require.NoError(t, l.Start(ctx, transcript.Entry{WorkspacePath: e.ws, SessionID: "sess-o", AgentID: "agent-o",
				Kind: string(transcript.KindRunInBackground), Status: e.status, StartedAt: time.Now()}))
		}
		rep, err := transcript.Recover(ctx, s.Root(), l, "")
		require.NoError(t, err)
		require.Len(t, rep.Finished, 1)
		require.Contains(t, rep.Finished[0].Reason, "has status=failed, status=completed;")
		require.Equal(t, "completed", rep.Finished[0].Lifecycle, "the last row in workspace order")
	})
}
