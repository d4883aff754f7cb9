package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/reconcile"
)

// The hand-written migrations the floors run: exactly the end state the
// declaration asks for, written by someone who knows the starting shape.
const (
	amendedSQLite = `CREATE TABLE schemastate_bench_new (
	id TEXT NOT NULL PRIMARY KEY,
	task_session_id TEXT NOT NULL REFERENCES task_sessions (id) ON DELETE CASCADE,
	task_id TEXT NOT NULL,
	turn_id TEXT,
	agent_execution_id TEXT NOT NULL DEFAULT 'unknown',
	tool_call_id TEXT NOT NULL,
	parent_tool_call_id TEXT,
	subagent_type TEXT,
	description TEXT,
	agent_id TEXT,
	child_session_id TEXT,
	model TEXT,
	agent_status TEXT,
	tool_status TEXT,
	is_async INTEGER NOT NULL DEFAULT 0,
	total_tokens INTEGER,
	tool_use_count INTEGER,
	duration_ms INTEGER,
	source TEXT NOT NULL DEFAULT 'live',
	observed_at TIMESTAMP NOT NULL,
	settled_at TIMESTAMP,
	updated_at TIMESTAMP NOT NULL
)`
	legacyColumns = `id, task_session_id, task_id, turn_id, tool_call_id, parent_tool_call_id, subagent_type,
	description, agent_id, child_session_id, model, agent_status, tool_status, is_async, total_tokens,
	tool_use_count, duration_ms, source, observed_at, settled_at, updated_at`
)

var handRebuildSQLite = []string{
	amendedSQLite,
	"INSERT INTO schemastate_bench_new (" + legacyColumns + ") SELECT " + legacyColumns + " FROM task_session_subagents",
	"DROP TABLE task_session_subagents",
	"ALTER TABLE schemastate_bench_new RENAME TO task_session_subagents",
	"CREATE UNIQUE INDEX task_session_subagents_session_execution_tool_call_key ON task_session_subagents (task_session_id, agent_execution_id, tool_call_id)",
	"CREATE INDEX idx_subagents_session_id ON task_session_subagents (task_session_id)",
	"CREATE INDEX idx_subagents_task_id ON task_session_subagents (task_id)",
	"CREATE INDEX idx_subagents_turn_id ON task_session_subagents (turn_id)",
}

var handSwapPostgres = []string{
	`ALTER TABLE task_session_subagents
	DROP CONSTRAINT task_session_subagents_task_session_id_tool_call_id_key,
	ALTER COLUMN total_tokens TYPE bigint,
	ALTER COLUMN tool_use_count TYPE bigint,
	ALTER COLUMN duration_ms TYPE bigint,
	ADD COLUMN agent_execution_id text NOT NULL DEFAULT 'unknown',
	ADD CONSTRAINT task_session_subagents_session_execution_tool_call_key UNIQUE (task_session_id, agent_execution_id, tool_call_id)`,
}

// rebuild measures the shape step of a reconcile on the legacy store — the
// SQLite table rebuild, or the PostgreSQL constraint swap — against the
// hand-written migration on the same rows. On PostgreSQL it also watches the
// ACCESS EXCLUSIVE lock and a concurrent reader.
func (b *bench) rebuild(ctx context.Context, rep *Report) error {
	// One untimed pass first: it creates the other owned tables, so the
	// timed shape steps do nothing but the subagents migration.
	if err := b.restoreLegacy(ctx); err != nil {
		return err
	}
	if _, err := reconcile.Reconcile(ctx, b.db, reconcile.WithLogger(b.quiet)); err != nil {
		return err
	}
	name, floorIs, target, hand := Rebuild, "create, copy, drop, rename, four indexes (hand-written, same transaction shape)", 1.15, handRebuildSQLite
	if b.d == dialect.Postgres {
		name, floorIs, target, hand = ConstraintSwap, "one hand-written ALTER TABLE to the declared shape (drop constraint, widen the three metrics to bigint, add column, add constraint) in its own transaction; ours is the shape step plus the widen step", 0, handSwapPostgres
	}
	var plans []time.Duration
	var lock *Lock
	if b.d == dialect.Postgres {
		lock = &Lock{}
	}
	var holds, applies, checks []time.Duration
	m, err := b.measure(name, floorIs, target,
		func(int) (time.Duration, error) {
			if err := b.restoreLegacy(ctx); err != nil {
				return 0, err
			}
			t0 := time.Now()
			if _, err := reconcile.Plan(ctx, b.db); err != nil {
				return 0, err
			}
			plans = append(plans, time.Since(t0))
			var w *watcher
			var err error
			if lock != nil {
				if w, err = b.watch(ctx); err != nil {
					return 0, err
				}
			}
			// The shape step reports "applying <table>" just before its
			// statements and calls its failpoint just after them.
			var tApply, tApplied time.Time
			progress := func(p reconcile.Progress) {
				if p.Step == reconcile.StepShape && p.Message == "applying task_session_subagents" {
					tApply = time.Now()
				}
			}
			fp := func(point string) error {
				if point == reconcile.FailpointShapeApplied {
					tApplied = time.Now()
				}
				return nil
			}
			r, err := reconcile.Reconcile(ctx, b.db, reconcile.WithLogger(b.quiet), reconcile.WithProgress(progress), reconcile.WithFailpoint(fp))
			if !tApply.IsZero() && !tApplied.IsZero() {
				applies = append(applies, tApplied.Sub(tApply))
			}
			if w != nil {
				held, worst, n, poll := w.stop()
				holds = append(holds, held)
				lock.ReaderQueries += n
				lock.PollInterval = poll
				if worst > lock.ReaderWorst {
					lock.ReaderWorst = worst
				}
			}
			if err != nil {
				return 0, err
			}
			s := r.Step(reconcile.StepShape)
			if s.Status != reconcile.Applied {
				return 0, fmt.Errorf("%w: shape step %s: %s", errUnexpected, s.Status, s.Detail)
			}
			// On PostgreSQL the type widenings run as their own step right
			// after the shape step; the floor does both in one ALTER.
			if w := r.Step(reconcile.StepWiden); w != nil {
				return s.Duration + w.Duration, nil
			}
			return s.Duration, nil
		},
		func(int) (time.Duration, error) {
			if err := b.restoreLegacy(ctx); err != nil {
				return 0, err
			}
			if b.d == dialect.SQLite {
				// Untimed for the floor: what the reconciler's rebuild adds
				// around the copy (a row count and a foreign-key check before
				// and after), timed once on the same table.
				t0 := time.Now()
				for _, q := range []string{"SELECT COUNT(*) FROM task_session_subagents", "PRAGMA foreign_key_check(task_session_subagents)", "PRAGMA foreign_key_check(task_session_subagents)"} {
					if err := drainQuery(ctx, b.db, q); err != nil {
						return 0, err
					}
				}
				checks = append(checks, time.Since(t0))
			}
			return b.handMigration(ctx, hand)
		})
	if err != nil {
		return err
	}
	m.Detail = fmt.Sprintf("of the shape step: executing the planned statements %s median; inspect+diff+plan alone (reconcile.Plan, no lock) %s median",
		median(applies).Round(time.Microsecond), median(plans).Round(time.Microsecond))
	if len(checks) > 0 {
		m.Detail += fmt.Sprintf("; the rebuild's own safety checks (row count, foreign_key_check before and after) %s median", median(checks).Round(time.Microsecond))
	}
	rep.Measurements = append(rep.Measurements, m)
	if lock != nil {
		lock.HeldMedian = median(holds)
		for _, h := range holds {
			lock.HeldMax = max(lock.HeldMax, h)
		}
		if lock.ReaderBaseline, err = b.readerBaseline(ctx, lock.ReaderQueries); err != nil {
			return err
		}
		rep.Lock = lock
	}
	return nil
}

// handMigration runs stmts on one connection as the reconciler's session
// would: on SQLite with foreign keys off, inside BEGIN IMMEDIATE, timing the
// statements (the reconcile's shape step does not include the final
// COMMIT); on PostgreSQL as one transaction, timed with its COMMIT (as the
// step's is).
func (b *bench) handMigration(ctx context.Context, stmts []string) (time.Duration, error) {
	conn, err := b.db.Conn(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	if b.d == dialect.SQLite {
		if _, err := conn.ExecContext(ctx, "PRAGMA foreign_keys = OFF"); err != nil {
			return 0, err
		}
		defer conn.ExecContext(context.Background(), "PRAGMA foreign_keys = ON") //nolint:errcheck
		if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
			return 0, err
		}
		t0 := time.Now()
		if err := execAll(ctx, conn, stmts); err != nil {
			conn.ExecContext(context.Background(), "ROLLBACK") //nolint:errcheck
			return 0, err
		}
		el := time.Since(t0)
		_, err := conn.ExecContext(ctx, "COMMIT")
		return el, err
	}
	t0 := time.Now()
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	if err := execAll(ctx, tx, stmts); err != nil {
		tx.Rollback() //nolint:errcheck
		return 0, err
	}
	if err := tx.Commit(); err != nil {
		return 0, err
	}
	return time.Since(t0), nil
}

func drainQuery(ctx context.Context, q dialect.Querier, query string) error {
	rows, err := q.QueryContext(ctx, query)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
	}
	return rows.Err()
}

func execAll(ctx context.Context, q dialect.Querier, stmts []string) error {
	for _, s := range stmts {
		if _, err := q.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("%.50s…: %w", s, err)
		}
	}
	return nil
}

// watcher polls pg_locks for an ACCESS EXCLUSIVE lock on the subagents table
// on one connection and runs a reader's SELECT in a loop on another.
type watcher struct {
	cancel      context.CancelFunc
	wg          sync.WaitGroup
	first, last time.Time
	polls       int
	pollStart   time.Time
	worst       time.Duration
	reads       int
	err         error
}

func (b *bench) watch(ctx context.Context) (*watcher, error) {
	var rel uint32
	if err := b.db.QueryRowContext(ctx, `SELECT 'task_session_subagents'::regclass::oid`).Scan(&rel); err != nil {
		return nil, err
	}
	var session string
	if err := b.db.QueryRowContext(ctx, `SELECT task_session_id FROM task_session_subagents LIMIT 1`).Scan(&session); err != nil {
		return nil, err
	}
	pollConn, err := b.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	readConn, err := b.db.Conn(ctx)
	if err != nil {
		pollConn.Close()
		return nil, err
	}
	wctx, cancel := context.WithCancel(ctx)
	w := &watcher{cancel: cancel, pollStart: time.Now()}
	w.wg.Add(2)
	go func() {
		defer w.wg.Done()
		defer pollConn.Close()
		for wctx.Err() == nil {
			var held bool
			err := pollConn.QueryRowContext(wctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE relation = $1 AND mode = 'AccessExclusiveLock' AND granted)`, rel).Scan(&held)
			now := time.Now()
			if err != nil {
				return
			}
			w.polls++
			if held {
				if w.first.IsZero() {
					w.first = now
				}
				w.last = now
			}
		}
	}()
	go func() {
		defer w.wg.Done()
		defer readConn.Close()
		for wctx.Err() == nil {
			t0 := time.Now()
			var n int
			if err := readConn.QueryRowContext(wctx, `SELECT COUNT(*) FROM task_session_subagents WHERE task_session_id = $1`, session).Scan(&n); err != nil {
				return
			}
			w.worst = max(w.worst, time.Since(t0))
			w.reads++
		}
	}()
	return w, nil
}

// stop ends both loops and returns the lock's observed hold (first to last
// sample that saw it, plus one poll interval), the reader's worst latency,
// its query count and the poll interval.
func (w *watcher) stop() (held, worst time.Duration, reads int, poll time.Duration) {
	end := time.Now()
	w.cancel()
	w.wg.Wait()
	if w.polls > 0 {
		poll = end.Sub(w.pollStart) / time.Duration(w.polls)
	}
	if !w.first.IsZero() {
		held = w.last.Sub(w.first) + poll
	}
	return held, w.worst, w.reads, poll
}

// readerBaseline is the reader's worst latency over n SELECTs with nothing
// else running: what the reader's worst would be without the reconcile.
func (b *bench) readerBaseline(ctx context.Context, n int) (time.Duration, error) {
	var session string
	if err := b.db.QueryRowContext(ctx, `SELECT task_session_id FROM task_session_subagents LIMIT 1`).Scan(&session); err != nil {
		return 0, err
	}
	conn, err := b.db.Conn(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	var worst time.Duration
	for i := 0; i < max(n, 100); i++ {
		t0 := time.Now()
		var c int
		if err := conn.QueryRowContext(ctx, `SELECT COUNT(*) FROM task_session_subagents WHERE task_session_id = $1`, session).Scan(&c); err != nil {
			return 0, err
		}
		worst = max(worst, time.Since(t0))
	}
	return worst, nil
}
