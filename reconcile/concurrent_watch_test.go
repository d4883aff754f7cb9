package reconcile_test

import (
	"context"
	"database/sql"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	schemastate "github.com/schemastate/schemastate"
	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/hooks"
	"github.com/schemastate/schemastate/internal/ops"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/reconcile"
)

// twinDatabase creates a second database on the test server with a schema
// of db's name holding the same host tables and pre-amendment table: one
// tenant's database beside another's, same names throughout. It is dropped
// when the test ends.
func twinDatabase(t *testing.T, db *dbtest.DB) *dbtest.DB {
	t.Helper()
	name := uniqueName("schemastate_twin_")
	db.Exec(t, `CREATE DATABASE `+name)
	dsn := editDSN(t, db.DSN, func(u *url.URL) { u.Path = "/" + name })
	twin, err := sql.Open("pgx", dsn)
	require.NoError(t, err)
	t.Cleanup(func() {
		twin.Close()
		_, _ = db.DB.Exec(`DROP DATABASE IF EXISTS ` + name + ` WITH (FORCE)`)
	})
	_, err = twin.Exec(`CREATE SCHEMA ` + dialect.QuoteIdent(db.Schema))
	require.NoError(t, err)
	other := &dbtest.DB{DB: twin, Dialect: dialect.Postgres, DSN: dsn, Schema: db.Schema}
	other.Host(t).Legacy(t)
	seedLegacy(t, other)
	return other
}

// heldAfterAlter takes a SHARE lock on the table from another session of db
// once the alter phase committed, so the concurrent build after it waits;
// the lock is held until the returned release (or the test's end).
func heldAfterAlter(t *testing.T, db *dbtest.DB) (reconcile.Option, func() int, func()) {
	t.Helper()
	holder, err := db.DB.Conn(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { holder.Close() })
	var tx *sql.Tx
	var pid int
	fp := reconcile.WithFailpoint(func(p string) error {
		if p != hooks.FailpointAfterPhase("task_session_subagents.alter") {
			return nil
		}
		var err error
		if tx, err = holder.BeginTx(ctx, nil); err != nil {
			return err
		}
		if err := tx.QueryRow(`SELECT pg_backend_pid()`).Scan(&pid); err != nil {
			return err
		}
		_, err = tx.Exec(`LOCK TABLE task_session_subagents IN SHARE MODE`)
		return err
	})
	release := func() {
		if tx != nil {
			_ = tx.Rollback()
		}
	}
	t.Cleanup(release)
	return fp, func() int { return pid }, release
}

// buildWaiting waits until db's concurrent build of the key waits on a lock.
func buildWaiting(t *testing.T, db *dbtest.DB) {
	t.Helper()
	require.NoError(t, poll(func() (bool, error) {
		pids, err := pidsOf(db, `SELECT pid FROM pg_stat_activity WHERE datname = current_database()
 AND query LIKE '%CREATE UNIQUE INDEX CONCURRENTLY%' AND state = 'active' AND wait_event_type = 'Lock'`)
		return len(pids) == 1, err
	}), "the build waits on the held lock")
}

type result struct {
	rep *reconcile.Report
	err error
}

// Two tenants, one database each, the same schema, tables and index names,
// each building its key CONCURRENTLY at the same time behind a lock another
// session holds. Tenant A's bound is tight (2 s), tenant B's generous: A's
// build is cancelled at its bound and fails naming the session that holds
// its table; B's build — the same statement text, started later — is
// untouched, and completes once its table is free. Before, A's watcher
// found "its" backend by query text alone and took the newest match in any
// database: it cancelled B's build and left A's waiting.
func TestOnline_ConcurrentWaitBoundsOnlyItsOwnBuild(t *testing.T) {
	a := openPostgres(t).Host(t).Legacy(t)
	seedLegacy(t, a)
	b := twinDatabase(t, a)

	holdA, holderA, releaseA := heldAfterAlter(t, a)
	doneA := make(chan result, 1)
	go func() {
		rep, err := reconcile.Reconcile(ctx, a.DB, append(append([]reconcile.Option{}, online...), holdA, reconcile.WithConcurrentWait(2*time.Second))...)
		doneA <- result{rep, err}
	}()
	buildWaiting(t, a)
	holdB, _, releaseB := heldAfterAlter(t, b)
	doneB := make(chan result, 1)
	go func() {
		rep, err := reconcile.Reconcile(ctx, b.DB, append(append([]reconcile.Option{}, online...), holdB, reconcile.WithConcurrentWait(time.Minute))...)
		doneB <- result{rep, err}
	}()
	buildWaiting(t, b)

	var ra result
	select {
	case ra = <-doneA:
	case <-time.After(20 * time.Second):
		releaseA()
		ra = <-doneA
		t.Errorf("tenant A's build waited past its bound: %s", describe(ra.rep))
	}
	select {
	case rb := <-doneB:
		releaseA()
		t.Fatalf("tenant B's reconcile ended while its table was held: %v %s", rb.err, describe(rb.rep))
	case <-time.After(500 * time.Millisecond):
	}
	buildWaiting(t, b) // untouched, still waiting
	require.ErrorIs(t, ra.err, ops.ErrLockNotAcquired, describe(ra.rep))
	shapeA := ra.rep.Step(reconcile.StepShape)
	require.Contains(t, shapeA.Detail, "waited 2s")
	require.Contains(t, shapeA.Detail, "pid "+strconv.Itoa(holderA()), "names the session holding A's table")
	releaseA()

	releaseB()
	rb := <-doneB
	require.NoError(t, rb.err, describe(rb.rep))
	require.Contains(t, rb.rep.Step(reconcile.StepShape).Phases, "task_session_subagents.build_index."+subagentsKey)
	requireAC33(t, b, freshIndexSet(t, dialect.Postgres))
	mustReconcile(t, a, online...)
	requireAC33(t, a, freshIndexSet(t, dialect.Postgres))
}

// A concurrent build whose statement is longer than
// track_activity_query_size (1 kB by default, which pg_stat_activity cuts
// its text to) is bounded all the same: an index declared with a 2 kB
// predicate, its build held up by a session holding the table, is
// cancelled at its 1 s bound and fails naming that session. Before, its
// cut text never equalled the statement, the watcher never found it, and
// the build waited for as long as the table was held.
func TestOnline_ConcurrentWaitBoundsALongStatement(t *testing.T) {
	db := openPostgres(t)
	seedLegacyStore(t, db)
	mustReconcile(t, db, quiet)
	var size int
	require.NoError(t, db.QueryRow(`SELECT setting::int FROM pg_settings WHERE name = 'track_activity_query_size'`).Scan(&size))
	long := "model <> '" + strings.Repeat("x", size+1024) + "'"
	src := strings.Replace(string(schemastate.SchemaHCL), "  index \"idx_subagents_turn_id\" {",
		"  index \"idx_subagents_long\" {\n    columns = [column.model]\n    where   = \""+long+"\"\n  }\n  index \"idx_subagents_turn_id\" {", 1)
	require.Contains(t, src, "idx_subagents_long")

	holder, err := db.DB.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer holder.Rollback()
	var pid int
	require.NoError(t, holder.QueryRow(`SELECT pg_backend_pid()`).Scan(&pid))
	_, err = holder.Exec(`LOCK TABLE task_session_subagents IN SHARE MODE`)
	require.NoError(t, err)

	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	opts := append(append([]reconcile.Option{}, online...), quiet, reconcile.WithConcurrentWait(time.Second),
		reconcile.WithDeclaration([]byte(src), "long_predicate.hcl"))
	rep, err := reconcile.Reconcile(cctx, db.DB, opts...)
	require.NoError(t, cctx.Err(), "the build's wait was bounded: %s", describe(rep))
	require.ErrorIs(t, err, ops.ErrLockNotAcquired, describe(rep))
	shape := rep.Step(reconcile.StepShape)
	require.Contains(t, shape.Detail, "build_index.idx_subagents_long")
	require.Contains(t, shape.Detail, "waited 1s")
	require.Contains(t, shape.Detail, "pid "+strconv.Itoa(pid))
	require.Zero(t, count(t, db, `SELECT count(*) FROM pg_class WHERE relname = 'idx_subagents_long' AND relnamespace = current_schema()::regnamespace`), "the INVALID index it left was dropped")

	require.NoError(t, holder.Rollback())
	rep = mustReconcile(t, db, append(append([]reconcile.Option{}, online...), quiet, reconcile.WithDeclaration([]byte(src), "long_predicate.hcl"))...)
	require.Contains(t, rep.Step(reconcile.StepShape).Phases, "task_session_subagents.build_index.idx_subagents_long")
}

// Behind a transaction-mode pooler, where the build and its watcher run on
// server connections the pooler picks, the watcher still finds the build
// by its tag and bounds its wait: behind a host transaction holding an old
// snapshot, the build is cancelled at its 1 s bound, fails naming that
// transaction and leaves no INVALID index; once it ends the next boot
// converges through the pooler.
func TestOnline_ConcurrentWaitBoundedBehindPooler(t *testing.T) {
	p, pooled := legacyBehindPooler(t)
	direct := p.Direct
	old, err := direct.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
	require.NoError(t, err)
	defer old.Rollback()
	var oldPID int
	require.NoError(t, old.QueryRow(`SELECT pg_backend_pid()`).Scan(&oldPID))

	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	rep, err := reconcile.Reconcile(cctx, pooled, append(append([]reconcile.Option{}, online...), quiet, reconcile.WithConcurrentWait(time.Second))...)
	require.NoError(t, cctx.Err(), "the build's wait was bounded: %s", describe(rep))
	require.ErrorIs(t, err, ops.ErrLockNotAcquired, describe(rep))
	shape := rep.Step(reconcile.StepShape)
	require.Contains(t, shape.Detail, "waited 1s")
	require.Contains(t, shape.Detail, "pid "+strconv.Itoa(oldPID))
	require.Empty(t, direct.Strings(t, `SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
 WHERE NOT i.indisvalid AND c.relnamespace = current_schema()::regnamespace`))

	require.NoError(t, old.Rollback())
	mustReconcile(t, &dbtest.DB{DB: pooled, Dialect: dialect.Postgres}, append(append([]reconcile.Option{}, online...), quiet)...)
	requireAC33(t, direct, freshIndexSet(t, dialect.Postgres))
}

// A host pool of two (the lock's connection and the steps') lends the
// watchers of a concurrent build — the wait's bound, the build's progress —
// no connection while the build runs: each waits for one under the watch's
// context, which the build's end cancels, so the boot goes on. (A watcher
// whose wait ignored the cancel held the phase's end until the boot's
// context ran out.)
func TestOnline_PoolOfTwoCompletesWithTheWatchersRunning(t *testing.T) {
	db := openPostgres(t)
	seedLegacyStore(t, db)
	pool := hostPool(t, db, 2)
	bounded, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// The build waits a second behind a SHARE lock: the watchers tick.
	build := holdAfter(db, hooks.FailpointAfterPhase("task_session_subagents.alter"), "task_session_subagents", "SHARE", time.Second)
	start := time.Now()
	rep, err := reconcile.Reconcile(bounded, pool, append(append([]reconcile.Option{}, online...),
		reconcile.WithFailpoint(build), reconcile.WithProgress(func(reconcile.Progress) {}))...)
	require.NoError(t, err, describe(rep))
	require.Less(t, time.Since(start), 20*time.Second, "the boot did not wait on its own watchers")
	requireAC33(t, db, freshIndexSet(t, db.Dialect))
}
