package capture_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/capture"
	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/declare"
	"github.com/schemastate/schemastate/internal/instant"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/internal/testkit/proctest"
	"github.com/schemastate/schemastate/reconcile"
)

// Fixed identities. Execution ids are UUIDs, as the host's are.
const (
	sessA = "sess-a"
	sessB = "sess-b"
	taskA = "task-a"
	taskB = "task-b"
	execE = "0f8fad5b-d9cb-469f-a165-70867728950e"
	execL = "7c9e6679-7425-40de-944b-e07fc1f90ae7"
	turn1 = "turn-1"
	turn2 = "turn-2"
)

// t0 is the base observation time of every test; offsets keep frames ordered.
var t0 = time.Date(2026, 7, 30, 1, 39, 37, 271235000, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

// store is a declared-shape database with two sessions, the writer under test
// and the log lines it wrote.
type store struct {
	*dbtest.DB
	w   *capture.Writer
	log *logBuffer
}

// newStore creates the host tables, reconciles the declared table into place
// and inserts the two parent sessions.
func newStore(t *testing.T, db *dbtest.DB) *store {
	t.Helper()
	declared(t, db)
	s := withSessions(t, db)
	require.NoError(t, s.w.Check(context.Background()), "the writer starts on the declared table")
	return s
}

// eachStore runs fn once per dialect, each time on a fresh store (newStore).
func eachStore(t *testing.T, fn func(t *testing.T, s *store)) {
	t.Helper()
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) { fn(t, newStore(t, db)) })
}

// declared creates the host tables and reconciles the declared table into place.
func declared(t testing.TB, db *dbtest.DB) {
	t.Helper()
	db.Host(t)
	reconcileQuietly(t, db)
}

// reconcileQuietly runs a whole reconcile of db, its log discarded.
func reconcileQuietly(t testing.TB, db *dbtest.DB) {
	t.Helper()
	_, err := reconcile.Reconcile(context.Background(), db.DB, reconcile.WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
}

// floorInsert prepares the benchmarks' floor: a plain single-row INSERT of
// task_session_subagents's 22 columns, in the order the floor binds them,
// and returns it with the timestamp value bound to observed_at, settled_at
// and updated_at.
func floorInsert(b *testing.B, db *dbtest.DB) (*sql.Stmt, any) {
	b.Helper()
	cols := []string{"id", "task_session_id", "task_id", "turn_id", "agent_execution_id", "tool_call_id",
		"parent_tool_call_id", "subagent_type", "description", "agent_id", "child_session_id", "model",
		"agent_status", "tool_status", "is_async", "total_tokens", "tool_use_count", "duration_ms",
		"source", "observed_at", "settled_at", "updated_at"}
	q := db.Q(`INSERT INTO task_session_subagents (` + strings.Join(cols, ", ") + `) VALUES (` +
		strings.TrimSuffix(strings.Repeat("?, ", len(cols)), ", ") + `)`)
	now := instant.RowTime(db.Dialect, time.Now())
	stmt, err := db.DB.PrepareContext(context.Background(), q) // prepared once, as Record's upsert is
	require.NoError(b, err)
	return stmt, now
}

// writer is NewWriter on a table it must start on.
func writer(t testing.TB, db *sql.DB, d dialect.Dialect, opts ...capture.Option) *capture.Writer {
	t.Helper()
	w, err := capture.NewWriter(context.Background(), db, d, opts...)
	require.NoError(t, err)
	return w
}

func withSessions(t *testing.T, db *dbtest.DB) *store {
	t.Helper()
	for _, s := range [][2]string{{sessA, taskA}, {sessB, taskB}} {
		_, err := db.DB.Exec(db.Q(`INSERT INTO task_sessions (id, task_id) VALUES (?, ?)`), s[0], s[1])
		require.NoError(t, err)
	}
	s := &store{DB: db, log: &logBuffer{}}
	s.w = capture.NewUncheckedWriter(db.DB, db.Dialect, s.logger())
	return s
}

// logger is the option that logs to s.log, as JSON lines.
func (s *store) logger() capture.Option {
	return capture.WithLogger(slog.New(slog.NewJSONHandler(s.log, nil)))
}

// recordAll records frames, each from its own goroutine, released together,
// and returns each Record's error, in the frames' order.
func recordAll(w *capture.Writer, frames []capture.Frame) []error {
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make([]error, len(frames))
	for i := range frames {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs[i] = w.Record(context.Background(), frames[i])
		}()
	}
	close(start)
	wg.Wait()
	return errs
}

// numbered is n frames for sessA/execE, toolu_0 … toolu_<n-1>, all observed
// at at(0).
func numbered(n int) []capture.Frame {
	frames := make([]capture.Frame, n)
	for i := range frames {
		frames[i] = frame(fmt.Sprintf("toolu_%d", i), at(0))
	}
	return frames
}

// record records frames in order and requires each to persist.
func (s *store) record(t *testing.T, frames ...capture.Frame) {
	t.Helper()
	for _, f := range frames {
		require.NoError(t, s.w.Record(context.Background(), f))
	}
}

// frame is a minimal recordable frame for sessA/execE.
func frame(toolCallID string, observed time.Time, mod ...func(*capture.Frame)) capture.Frame {
	f := capture.Frame{SessionID: sessA, TaskID: taskA, TurnID: turn1, ExecutionID: execE,
		ToolCallID: toolCallID, ObservedAt: observed}
	for _, m := range mod {
		m(&f)
	}
	return f
}

func intp(v int) *int { return &v }

// rows lists a session's rows (AC-13 order).
func (s *store) rows(t *testing.T, sessionID string) []capture.Row {
	t.Helper()
	rs, err := capture.ListBySession(context.Background(), s.DB.DB, s.Dialect, sessionID)
	require.NoError(t, err)
	return rs
}

// one returns the single row for (sessA, execution, toolCallID).
func (s *store) one(t *testing.T, execution, toolCallID string) capture.Row {
	t.Helper()
	var found []capture.Row
	for _, r := range s.rows(t, sessA) {
		if r.AgentExecutionID == execution && r.ToolCallID == toolCallID {
			found = append(found, r)
		}
	}
	require.Len(t, found, 1, "rows for (%s, %s, %s)", sessA, execution, toolCallID)
	return found[0]
}

// raw is every column of one row as stored, rendered as text by the database
// itself, for byte-for-byte comparisons.
func (s *store) raw(t *testing.T, session, execution, toolCallID string) []sql.NullString {
	t.Helper()
	cols, err := declare.Columns(declare.Subagents)
	require.NoError(t, err)
	sel := make([]string, len(cols))
	for i, c := range cols {
		sel[i] = "CAST(" + c + " AS TEXT)"
	}
	out := make([]sql.NullString, len(cols))
	ptrs := make([]any, len(cols))
	for i := range out {
		ptrs[i] = &out[i]
	}
	err = s.DB.QueryRow(s.Q(`SELECT `+strings.Join(sel, ", ")+` FROM task_session_subagents
		WHERE task_session_id = ? AND agent_execution_id = ? AND tool_call_id = ?`), session, execution, toolCallID).Scan(ptrs...)
	require.NoError(t, err)
	return out
}

func (s *store) count(t *testing.T, where string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, s.DB.QueryRow(s.Q(`SELECT COUNT(*) FROM task_session_subagents WHERE `+where), args...).Scan(&n))
	return n
}

// ts is at as the host writes a timestamp column on the store's dialect.
func (s *store) ts(at time.Time) any { return instant.RowTime(s.Dialect, at) }

// logBuffer collects JSON log lines from concurrent writers.
type logBuffer struct{ proctest.Buffer }

func (b *logBuffer) records(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &m))
		out = append(out, m)
	}
	return out
}

// holdSQLiteLock takes the write lock of db's file on its own connection and
// releases it after d, or earlier when release is called. It returns once the
// lock is held.
func holdSQLiteLock(t *testing.T, db *dbtest.DB, d time.Duration) (released <-chan struct{}, release func()) {
	t.Helper()
	holder, err := sql.Open("sqlite", db.DSN)
	require.NoError(t, err)
	t.Cleanup(func() { holder.Close() })
	conn, err := holder.Conn(context.Background())
	require.NoError(t, err)
	_, err = conn.ExecContext(context.Background(), `BEGIN IMMEDIATE`)
	require.NoError(t, err)
	done, stop := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-time.After(d):
		case <-stop:
		}
		_, _ = conn.ExecContext(context.Background(), `COMMIT`)
		conn.Close()
	}()
	var once sync.Once
	release = func() { once.Do(func() { close(stop) }) }
	t.Cleanup(func() { release(); <-done })
	return done, release
}

// sqliteWithBusyTimeout opens the store's file again with a shorter busy
// timeout, so a test can hold the lock past it in little time.
func sqliteWithBusyTimeout(t *testing.T, db *dbtest.DB, ms int) *sql.DB {
	t.Helper()
	dsn := strings.Replace(db.DSN, "busy_timeout(10000)", fmt.Sprintf("busy_timeout(%d)", ms), 1)
	require.NotEqual(t, db.DSN, dsn)
	short, err := sql.Open("sqlite", dsn)
	require.NoError(t, err)
	t.Cleanup(func() { short.Close() })
	return short
}
