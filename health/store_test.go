package health_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/health"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
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
	declared(t, db)
	_, err := db.ExecContext(ctx, `DELETE FROM kandev_meta`)
	require.NoError(t, err)
	s := &store{t: t, db: db, ctx: ctx}
	s.session("s1")
	return s
}

// declared creates the host tables and reconciles the declared table into
// place, its log discarded.
func declared(t testing.TB, db *dbtest.DB) {
	t.Helper()
	db.Host(t)
	_, err := reconcile.Reconcile(context.Background(), db.DB, quiet)
	require.NoError(t, err)
}

// eachStore runs fn on each dialect against a new store (newStore).
func eachStore(t *testing.T, fn func(t *testing.T, s *store)) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) { fn(t, newStore(t, db)) })
}

// eachActivated runs fn on each dialect against a new store (newStore)
// whose capture_since is k.
func eachActivated(t *testing.T, fn func(t *testing.T, s *store)) {
	eachStore(t, func(t *testing.T, s *store) {
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
