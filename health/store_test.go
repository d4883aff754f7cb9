package health_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/health"
	"github.com/schemastate/schemastate/internal/instant"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/keys"
	"github.com/schemastate/schemastate/reconcile"
)

// store seeds a reconciled database with plain SQL: host messages, subagent
// rows and activation keys, each exactly as the test states them.
type store struct {
	t   *testing.T
	db  *dbtest.DB
	ctx context.Context
	n   int
}

// quiet is the reconcile option that logs nothing.
var quiet = reconcile.WithLogger(slog.New(slog.DiscardHandler))

// newStore creates the host tables, reconciles the declared table, and clears
// kandev_meta so each test constructs its own key state.
func newStore(t *testing.T, db *dbtest.DB) *store {
	t.Helper()
	ctx := context.Background()
	db.Host(t)
	_, err := reconcile.Reconcile(ctx, db.DB, quiet)
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, `DELETE FROM kandev_meta`)
	require.NoError(t, err)
	s := &store{t: t, db: db, ctx: ctx}
	s.session("s1")
	return s
}

// eachActivated runs fn on each dialect against a new store (newStore)
// whose capture_since is k.
func eachActivated(t *testing.T, fn func(t *testing.T, s *store)) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		s := newStore(t, db)
		s.activate(k)
		fn(t, s)
	})
}

func (s *store) exec(q string, args ...any) {
	s.t.Helper()
	_, err := s.db.ExecContext(s.ctx, s.db.Q(q), args...)
	require.NoError(s.t, err, q)
}

func (s *store) session(id string) {
	s.t.Helper()
	s.exec(`INSERT INTO task_sessions (id, task_id) VALUES (?, ?)`, id, "task-"+id)
}

func (s *store) key(name, value string) {
	s.t.Helper()
	s.exec(`INSERT INTO kandev_meta (key, value) VALUES (?, ?)`, name, value)
}

// activate writes capture_since (and execution_since, as a fully activated
// installation has both) at k.
func (s *store) activate(k time.Time) {
	s.t.Helper()
	s.key(keys.CaptureSince, instant.Format(k))
	s.key(keys.ExecutionSince, instant.Format(k))
}

// subagentMeta is the metadata the host writes on a subagent tool-call message.
func subagentMeta(toolCallID string) string {
	b, _ := json.Marshal(map[string]any{
		"tool_call_id": toolCallID,
		"status":       "completed",
		"normalized": map[string]any{
			"kind": "subagent_task",
			"subagent_task": map[string]any{
				"status": "completed", "agent_id": "agent-1", "model": "claude-opus-5[1m]", "total_tokens": 1234,
			},
		},
	})
	return string(b)
}

// message inserts a subagent tool-call message for (session, toolCallID) at at,
// with the session's task id.
func (s *store) message(session, toolCallID string, at time.Time) {
	s.t.Helper()
	s.rawMessage(session, "task-"+session, subagentMeta(toolCallID), s.ts(at))
}

// rawMessage inserts a message with exactly the given task_id, metadata and
// created_at bind values (nil → SQL NULL).
func (s *store) rawMessage(session string, taskID, metadata, createdAt any) {
	s.t.Helper()
	s.n++
	s.exec(`INSERT INTO task_session_messages (id, task_session_id, task_id, turn_id, content, metadata, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
		fmt.Sprintf("m%04d", s.n), session, taskID, "turn-1", "…", metadata, createdAt, createdAt)
}

// row inserts a subagent row as a live writer (or the backfill) would.
func (s *store) row(session, execution, toolCallID, source string, at time.Time) {
	s.t.Helper()
	s.rawRow(session, execution, toolCallID, source, s.ts(at))
}

func (s *store) rawRow(session, execution, toolCallID, source string, observedAt any) {
	s.t.Helper()
	s.n++
	s.exec(`INSERT INTO task_session_subagents (id, task_session_id, task_id, agent_execution_id, tool_call_id, source, observed_at, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
		fmt.Sprintf("r%04d", s.n), session, "task-"+session, execution, toolCallID, source, observedAt, observedAt)
}

// captured is a message and the row a working writer produces for it.
func (s *store) captured(session, toolCallID string, at time.Time) {
	s.t.Helper()
	s.message(session, toolCallID, at)
	s.row(session, "exec-1", toolCallID, "live", at)
}

func (s *store) ts(t time.Time) any { return instant.RowTime(s.db.Dialect, t) }

func (s *store) eval() *health.Report {
	s.t.Helper()
	r, err := health.Evaluate(s.ctx, s.db.DB)
	require.NoError(s.t, err)
	return r
}

// counts is the comparable part of a report; -1 stands for null.
type counts struct {
	Verdict                       health.Verdict
	Shortfall, Excess, Collisions int64
}

func countsOf(r *health.Report) counts {
	v := func(p *int64) int64 {
		if p == nil {
			return -1
		}
		return *p
	}
	return counts{r.Verdict, v(r.Shortfall), v(r.Excess), v(r.Collisions)}
}

// k is the activation instant most tests use: a microsecond-exact key
// mid-day, so same-day and one-microsecond cases are both constructible.
var k = time.Date(2026, 7, 30, 12, 0, 0, 500000000, time.UTC)
