package reconcile_test

import (
	"context"
	"database/sql"
	"hash/fnv"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/hooks"
	"github.com/schemastate/schemastate/internal/ops"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/reconcile"
)

// The PostgreSQL boot lock: pg_try_advisory_xact_lock held by a READ
// COMMITTED transaction of its own for the whole run (postgres.go).

// lockKey is the reconcile's advisory key for the test's schema, split as
// pg_locks shows it.
func lockKey(t *testing.T, db *dbtest.DB) (classid, objid int64) {
	t.Helper()
	var ident string
	require.NoError(t, db.QueryRow(`SELECT current_database() || '.' || current_schema()`).Scan(&ident))
	h := fnv.New64a()
	h.Write([]byte("schemastate/reconcile:" + ident))
	k := h.Sum64()
	return int64(uint32(k >> 32)), int64(uint32(k))
}

// lockHolder is the backend holding the reconcile's lock, or 0.
func lockHolder(t *testing.T, db *dbtest.DB) int {
	t.Helper()
	c, o := lockKey(t, db)
	var pid sql.NullInt64
	require.NoError(t, db.QueryRow(`SELECT max(pid) FROM pg_locks WHERE locktype = 'advisory' AND granted
 AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) AND classid::int8 = $1 AND objid::int8 = $2`, c, o).Scan(&pid))
	return int(pid.Int64)
}

// killLockHolder terminates the backend holding the reconcile's lock (it
// must have one), waiting up to 5 s for it to exit: the lock is lost.
func killLockHolder(t *testing.T, db *dbtest.DB) {
	t.Helper()
	pid := lockHolder(t, db)
	require.NotZero(t, pid)
	var ok bool
	require.NoError(t, db.QueryRow(`SELECT pg_terminate_backend($1, 5000)`, pid).Scan(&ok))
	require.True(t, ok)
}

// The report and the status name the lock each dialect uses.
func TestLock_ReportAndStatusNameTheMechanism(t *testing.T) {
	want := map[dialect.Dialect]string{dialect.Postgres: reconcile.LockAdvisoryXact, dialect.SQLite: reconcile.LockSQLiteWrite}
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		db.Host(t).Legacy(t)
		rep := mustReconcile(t, db)
		require.Equal(t, want[db.Dialect], rep.Lock)
		require.Equal(t, want[db.Dialect], observe(t, db).Lock)
	})
}

// The held lock does not hold up CREATE INDEX CONCURRENTLY: the online path
// (every table, WithOnlineAbove(0)) builds its unique index under the lock
// within a concurrent wait far shorter than the run. The lock's transaction
// is idle between its statements and holds no snapshot then; had its last
// statement left its portal (and so its snapshot) open, the build would wait
// for it until the wait ran out, naming it as the oldest open transaction.
func TestLock_HeldLockDoesNotBlockConcurrentIndexBuild(t *testing.T) {
	db := openPostgres(t).Host(t).Legacy(t)
	seedLegacy(t, db)
	var built bool
	var holder int
	opts := append(append([]reconcile.Option{}, online...), reconcile.WithConcurrentWait(3*time.Second),
		reconcile.WithFailpoint(func(p string) error {
			if strings.HasPrefix(p, "phase.") && strings.Contains(p, ".build_index.") {
				built = true
				holder = lockHolder(t, db)
			}
			return nil
		}))
	rep, err := reconcile.Reconcile(ctx, db.DB, opts...)
	require.NoError(t, err, describe(rep))
	require.True(t, built, "the online path built an index: %s", describe(rep))
	require.NotZero(t, holder, "the lock was held while the index was built")
	requireAC33(t, db, freshIndexSet(t, db.Dialect))
	require.Zero(t, lockHolder(t, db), "released")
}

// A replica whose lock transaction ended (here: its backend terminated, as
// a lost connection or a server timeout would end it) stops before its next
// phase with ErrLockLost, runs nothing more, and the next boot converges.
func TestLock_LostLockStopsBeforeTheNextPhase(t *testing.T) {
	db := openPostgres(t).Host(t).Legacy(t)
	seedLegacy(t, db)
	var first string
	var after []string
	opts := append(append([]reconcile.Option{}, online...), reconcile.WithFailpoint(func(p string) error {
		if !strings.HasPrefix(p, "phase.") || first != "" {
			return nil
		}
		first = p
		killLockHolder(t, db)
		return nil
	}), reconcile.WithExecHook(func(stmt string) {
		if first != "" {
			after = append(after, stmt)
		}
	}))
	rep, err := reconcile.Reconcile(ctx, db.DB, opts...)
	require.ErrorIs(t, err, ops.ErrLockLost, describe(rep))
	shape := rep.Step(reconcile.StepShape)
	require.Equal(t, reconcile.Failed, shape.Status)
	require.ErrorIs(t, shape.Err, ops.ErrLockLost)
	require.Empty(t, after, "nothing ran after the lock was lost (first phase done: %s)", first)
	require.Equal(t, reconcile.Failed, rep.Step(reconcile.StepExecutionSince).Status)
	require.ErrorIs(t, rep.Step(reconcile.StepExecutionSince).Err, ops.ErrLockLost)
	require.Nil(t, readKeys(t, db).ExecutionSince)

	reconcileToAC33(t, db)
}

// A reconcile waiting for the lock (it tried, found it held, and said so)
// takes it once the holder's transaction ends, re-checks under it and finds
// the work done: it runs nothing.
func TestLock_WaiterFindsTheWorkDone(t *testing.T) {
	db := openPostgres(t).Host(t).Legacy(t)
	seedLegacy(t, db)
	held := make(chan struct{})
	proceed := make(chan struct{})
	done := make(chan *reconcile.Report)
	go func() {
		rep, _ := reconcile.Reconcile(ctx, db.DB, reconcile.WithFailpoint(func(p string) error {
			if p == hooks.FailpointExecutionSinceObserve {
				close(held)
				<-proceed
			}
			return nil
		}))
		done <- rep
	}()
	<-held
	waiter := make(chan *reconcile.Report)
	waiting := make(chan struct{})
	var once sync.Once
	logger := slog.New(logSignal{msg: "another reconcile holds it", fn: func() { once.Do(func() { close(waiting) }) }})
	var ran []string
	go func() {
		rep, _ := reconcile.Reconcile(ctx, db.DB, reconcile.WithLogger(logger), reconcile.WithExecHook(func(s string) { ran = append(ran, s) }))
		waiter <- rep
	}()
	select { // the second reconcile tried the lock and did not get it
	case <-waiting:
	case <-time.After(30 * time.Second):
		t.Fatal("the second reconcile never found the lock held")
	}
	close(proceed)
	first := <-done
	require.NoError(t, first.Err(), describe(first))
	second := <-waiter
	require.NoError(t, second.Err(), describe(second))
	require.Equal(t, reconcile.Applied, second.Step(reconcile.StepLock).Status, describe(second))
	require.Empty(t, ran, "the waiter ran nothing")
	require.Equal(t, reconcile.Unchanged, second.Step(reconcile.StepShape).Status, "re-checked under the lock: %s", describe(second))
	require.True(t, second.Certified)
	require.Zero(t, lockHolder(t, db))
}

// logSignal is a slog handler that calls fn for each record whose message
// contains msg.
type logSignal struct {
	msg string
	fn  func()
}

func (h logSignal) Enabled(context.Context, slog.Level) bool { return true }

func (h logSignal) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, h.msg) {
		h.fn()
	}
	return nil
}

func (h logSignal) WithAttrs([]slog.Attr) slog.Handler { return h }

func (h logSignal) WithGroup(string) slog.Handler { return h }

// A pool of one connection cannot hold the lock's transaction beside the
// steps' connection: the lock step says so instead of waiting forever for a
// second connection.
func TestLock_PoolOfOneIsNamed(t *testing.T) {
	db := openPostgres(t).Host(t).Legacy(t)
	pool := hostPool(t, db, 1)
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	rep, err := reconcile.Reconcile(cctx, pool)
	require.ErrorIs(t, err, reconcile.ErrStepFailed)
	require.Contains(t, rep.Step(reconcile.StepLock).Detail, "SetMaxOpenConns(1)")
	require.NoError(t, cctx.Err())
}

// CREATE INDEX CONCURRENTLY's wait is bounded on the client side: behind a
// host transaction holding an old snapshot the build waits WithConcurrentWait,
// is cancelled, fails naming that transaction, leaves no INVALID index, and
// no connection of the pool is left with a lock_timeout of the reconcile's.
func TestLock_ConcurrentWaitBoundedWithoutSessionState(t *testing.T) {
	db := openPostgres(t).Host(t).Legacy(t)
	seedLegacy(t, db)
	var want string
	require.NoError(t, db.QueryRow(`SHOW lock_timeout`).Scan(&want))
	old, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
	require.NoError(t, err)
	defer old.Rollback()
	var oldPID int
	require.NoError(t, old.QueryRow(`SELECT pg_backend_pid()`).Scan(&oldPID))
	_, err = old.Exec(`SELECT count(*) FROM task_sessions`)
	require.NoError(t, err)

	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	start := time.Now()
	opts := append(append([]reconcile.Option{}, online...), reconcile.WithConcurrentWait(time.Second))
	rep, err := reconcile.Reconcile(cctx, db.DB, opts...)
	require.NoError(t, cctx.Err(), "the build's wait was bounded")
	require.ErrorIs(t, err, ops.ErrLockNotAcquired, describe(rep))
	require.Contains(t, rep.Step(reconcile.StepShape).Detail, "waited 1s")
	require.Contains(t, rep.Step(reconcile.StepShape).Detail, "pid "+strconv.Itoa(oldPID))
	require.Less(t, time.Since(start), 15*time.Second)
	require.Empty(t, db.Strings(t, `SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
 WHERE NOT i.indisvalid AND c.relnamespace = current_schema()::regnamespace`))

	// Every connection of the pool at once: none carries a lock_timeout.
	for _, got := range onEveryConnection(t, db.DB, `SHOW lock_timeout`) {
		require.Equal(t, want, got)
	}
	require.NoError(t, old.Rollback())
	mustReconcile(t, db, online...)
	requireAC33(t, db, freshIndexSet(t, db.Dialect))
}

// A replica that loses its lock inside the rebuild's long phases stops
// before its next batch of the copy, or its next chunk of the replay, with
// ErrLockLost — not only before the next phase — and the next boot
// converges with every row and value.
func TestLock_LostLockStopsTheRebuildBeforeItsNextBatch(t *testing.T) {
	for _, point := range []string{hooks.FailpointCopyBatch, hooks.FailpointReplayBatch, hooks.FailpointRebuildIndexBuilt} {
		t.Run(point, func(t *testing.T) {
			db := openPostgres(t).Host(t).Legacy(t)
			seedLegacy(t, db)
			seedMany(t, db, 2500)
			metrics := `SELECT id || ':' || COALESCE(total_tokens::text, 'NULL') || ':' || COALESCE(tool_use_count::text, 'NULL') || ':' || COALESCE(duration_ms::text, 'NULL') FROM task_session_subagents ORDER BY id`
			before := db.Strings(t, metrics)
			var hits []string
			opts := append(append([]reconcile.Option{}, online...), reconcile.WithFailpoint(func(p string) error {
				if p != hooks.FailpointCopyBatch && p != hooks.FailpointReplayBatch && p != hooks.FailpointRebuildIndexBuilt {
					return nil
				}
				hits = append(hits, p)
				if p == hooks.FailpointCopyBatch && len(hits) == 1 {
					// Every row changes during the copy: the replay's first
					// chunk (at least replayShort ids) asks for another.
					db.Exec(t, `UPDATE task_session_subagents SET tool_status = 'moved'`)
				}
				if p != point || slices.Contains(hits[:len(hits)-1], point) {
					return nil
				}
				if p == hooks.FailpointReplayBatch {
					// Entries the next chunk would replay, were it to run.
					db.Exec(t, `UPDATE task_session_subagents SET tool_status = 'again'`)
				}
				killLockHolder(t, db)
				return nil
			}))
			rep, err := reconcile.Reconcile(ctx, db.DB, opts...)
			require.ErrorIs(t, err, ops.ErrLockLost, describe(rep))
			widen := rep.Step(reconcile.StepWiden)
			require.Equal(t, reconcile.Failed, widen.Status, describe(rep))
			require.ErrorIs(t, widen.Err, ops.ErrLockLost)
			require.Equal(t, point, hits[len(hits)-1], "no batch ran after the lock was lost: %v", hits)
			switch point {
			case hooks.FailpointCopyBatch:
				require.Equal(t, 1, count(t, db, `SELECT next_page FROM schemastate_state_task_session_subagents`), "one batch copied")
			case hooks.FailpointReplayBatch:
				require.Equal(t, count(t, db, `SELECT COUNT(*) FROM task_session_subagents`), count(t, db, `SELECT COUNT(*) FROM schemastate_log_task_session_subagents`),
					"the second chunk did not run: the log holds every row's entry")
			case hooks.FailpointRebuildIndexBuilt:
				// The build that committed, and at most the one already
				// running beside it: no build started after the lock was lost.
				require.LessOrEqual(t, count(t, db, `SELECT COUNT(*) FROM pg_index WHERE indrelid = 'schemastate_new_task_session_subagents'::regclass`), 2)
			}
			require.Nil(t, readKeys(t, db).ExecutionSince)

			reconcileToAC33(t, db)
			require.Nil(t, observe(t, db).Upgrade)
			require.Subset(t, db.Strings(t, metrics), before, "every row, every metric value")
			require.Zero(t, count(t, db, `SELECT COUNT(*) FROM pg_class WHERE relname LIKE 'schemastate%'`))
		})
	}
}

// Two replicas booting at once end in one correct state: one performs the
// change, the other waits for the lock, re-inspects and finds nothing to do.
func TestReconcile_ConcurrentReconcilesConverge(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		seedLegacyStore(t, db)
		before := snapshot(t, db)
		pools := make([]*sql.DB, 4)
		for i := range pools {
			pool, err := sql.Open(driverName(db.Dialect), db.DSN)
			require.NoError(t, err)
			defer pool.Close()
			pools[i] = pool
		}
		reps, errs := reconcileTogether(pools)
		requireOneAppliedShape(t, reps, errs)
		requireAC33(t, db, freshIndexSet(t, db.Dialect))
		require.Equal(t, before, snapshot(t, db), "no row duplicated or lost")
		require.Equal(t, 1, count(t, db, `SELECT COUNT(*) FROM kandev_meta WHERE key = 'subagent_context_execution_since'`))
	})
}

// reconcileTogether runs one reconcile on each of pools at once and returns
// each one's report and error, in the pools' order.
func reconcileTogether(pools []*sql.DB, opts ...reconcile.Option) ([]*reconcile.Report, []error) {
	reps, errs := make([]*reconcile.Report, len(pools)), make([]error, len(pools))
	var wg sync.WaitGroup
	for i, pool := range pools {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reps[i], errs[i] = reconcile.Reconcile(ctx, pool, opts...)
		}()
	}
	wg.Wait()
	return reps, errs
}

// requireOneAppliedShape requires every one of several concurrent reconciles
// to succeed and exactly one of them to have applied the shape step: the
// others waited for the lock and found the work done.
func requireOneAppliedShape(t *testing.T, reps []*reconcile.Report, errs []error) {
	t.Helper()
	applied := 0
	for i := range reps {
		require.NoError(t, errs[i], describe(reps[i]))
		if reps[i].Step(reconcile.StepShape).Status == reconcile.Applied {
			applied++
		}
	}
	require.Equal(t, 1, applied, "exactly one replica performs the change")
}
