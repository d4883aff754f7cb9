package fanout_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/capture"
	"github.com/schemastate/schemastate/fanout"
	"github.com/schemastate/schemastate/internal/hooks"
	"github.com/schemastate/schemastate/internal/instant"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/reconcile"
)

var ctx = context.Background()

var quiet = slog.New(slog.DiscardHandler)

// TestMain gives this package's PostgreSQL tests a database of their own.
func TestMain(m *testing.M) { os.Exit(dbtest.Main(m)) }

// Two real execution ids, as the lifecycle mints them (uuid.New().String()).
const (
	execA = "6f1c2a9e-4b7d-4e21-9a3f-0d5b8c7e1a42"
	execB = "b3e8d5f0-2c19-4a6e-8f74-91a0c6d2e5b7"
)

func mustReconcile(t *testing.T, db *dbtest.DB, opts ...reconcile.Option) {
	t.Helper()
	rep, err := reconcile.Reconcile(ctx, db.DB, append([]reconcile.Option{reconcile.WithLogger(quiet)}, opts...)...)
	require.NoError(t, err)
	require.NotNil(t, rep)
}

// failAt runs a reconcile that fails at one failpoint, as a database error
// there would: the step fails, the boot goes on (AC-20). now, when not nil,
// is the clock the keys are sampled from.
func failAt(t *testing.T, db *dbtest.DB, point string, now func() time.Time) {
	t.Helper()
	h := hooks.Hooks{Now: now, Failpoint: func(p string) error {
		if p == point {
			return errors.New("forced failure at " + p)
		}
		return nil
	}}
	_, err := reconcile.Reconcile(hooks.With(ctx, h), db.DB, reconcile.WithLogger(quiet))
	require.ErrorIs(t, err, reconcile.ErrStepFailed)
}

// session creates the host's session row.
func session(t *testing.T, db *dbtest.DB, id, task string) {
	t.Helper()
	_, err := db.DB.Exec(db.Q(`INSERT INTO task_sessions (id, task_id) VALUES (?, ?) ON CONFLICT (id) DO NOTHING`), id, task)
	require.NoError(t, err)
}

// record writes one live frame through the live writer.
func record(t *testing.T, db *dbtest.DB, sessionID, task, toolCallID, execID string, observed time.Time) {
	t.Helper()
	session(t, db, sessionID, task)
	w, err := capture.NewWriter(ctx, db.DB, db.Dialect, capture.WithLogger(quiet))
	require.NoError(t, err)
	defer w.Close()
	require.NoError(t, w.Record(ctx, capture.Frame{SessionID: sessionID, TaskID: task, TurnID: "turn-1",
		ExecutionID: execID, ToolCallID: toolCallID, ToolStatus: "in_progress", ObservedAt: observed,
		Subagent: capture.SubagentTask{SubagentType: "general-purpose", Status: "async_launched", AgentID: "agent-" + toolCallID}}))
}

// message writes the host's message for a subagent tool call, as the host's
// history holds it: the backfill's source (AC-21).
func message(t *testing.T, db *dbtest.DB, id, sessionID, task, toolCallID string, created time.Time) {
	t.Helper()
	session(t, db, sessionID, task)
	meta, err := json.Marshal(map[string]any{"tool_call_id": toolCallID, "status": "complete",
		"normalized": map[string]any{"kind": "subagent_task", "subagent_task": map[string]any{"subagent_type": "general-purpose", "status": "completed"}}})
	require.NoError(t, err)
	_, err = db.DB.Exec(db.Q(`INSERT INTO task_session_messages
		(id, task_session_id, task_id, turn_id, content, type, metadata, created_at, updated_at)
		VALUES (?, ?, ?, 'turn-1', '', 'tool_call', ?, ?, ?)`),
		id, sessionID, task, string(meta), instant.RowTime(db.Dialect, created), instant.RowTime(db.Dialect, created))
	require.NoError(t, err)
}

// setKey writes an activation key as an earlier build or boot left it; the
// reconcile keeps a key that is present (AC-24 point 5).
func setKey(t *testing.T, db *dbtest.DB, key, value string) {
	t.Helper()
	_, err := db.DB.Exec(db.Q(`INSERT INTO kandev_meta (key, value) VALUES (?, ?)`), key, value)
	require.NoError(t, err)
}

// read is fanout.Read, checked against itself: Count gives the same summary
// from the same state, and the summary's counts are those of the rows.
func read(t *testing.T, db *dbtest.DB, scope fanout.Scope) *fanout.Result {
	t.Helper()
	res, err := fanout.Read(ctx, db.DB, scope)
	require.NoError(t, err)
	sum, err := fanout.Count(ctx, db.DB, scope)
	require.NoError(t, err)
	require.Equal(t, res.Summary, *sum, "Read and Count agree")
	require.Equal(t, int64(len(res.Rows)), res.Summary.Rows)
	byID, bySource := map[fanout.Identity]int64{}, map[string]int64{}
	for _, r := range res.Rows {
		byID[r.ExecutionIdentity]++
		bySource[r.Source]++
	}
	for _, id := range fanout.Identities {
		require.Equal(t, byID[id], res.Summary.ByIdentity[id], id)
	}
	for s, n := range res.Summary.BySource {
		require.Equal(t, bySource[s], n, s)
	}
	return res
}

// classes maps each row's tool_call_id/agent_execution_id/source to its class.
func classes(res *fanout.Result) map[string]fanout.Identity {
	out := map[string]fanout.Identity{}
	for _, r := range res.Rows {
		out[r.ToolCallID+"/"+r.AgentExecutionID+"/"+r.Source] = r.ExecutionIdentity
	}
	return out
}

func ptr[T any](v T) *T { return &v }
