package reconcile_test

import (
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/internal/hooks"
	"github.com/schemastate/schemastate/internal/readonly"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/reconcile"
)

// One index build of the rebuild fails while the other is mid-statement on
// the steps' connection: the other build is not cancelled, so that
// connection stays usable; the widen step fails naming the failed build,
// execution_since and the backfill apply as after any failed widen, and the
// next boot completes the widening with every row and value.
//
// The test holds a lock on the new table that every build waits for, so
// both are mid-statement; it cancels the build on the borrowed connection,
// waits for that worker to stop (its connection, returned to a pool that
// keeps none idle, ends), and only then lets the other build go on.
func TestOnline_FailedIndexBuildLeavesTheStepsConnectionUsable(t *testing.T) {
	db, before := seededOnlineStore(t)

	// The reconcile's own pool, named so its backends can be told apart;
	// a connection returned to it is closed.
	const app = "schemastate_rebuild_index_test"
	pool, err := sql.Open("pgx", dbtest.WithParam(t, db.DSN, "application_name", app))
	require.NoError(t, err)
	defer pool.Close()
	pool.SetMaxIdleConns(0)
	holder, err := db.DB.Conn(ctx)
	require.NoError(t, err)
	defer holder.Close()

	var stepsPID int
	var reached bool
	var lock *sql.Tx
	var cancelled string // the statement of the build the test cancelled
	interfered := make(chan error, 1)
	hook := reconcile.WithFailpoint(func(p string) error {
		if p != hooks.FailpointAfterPhase("task_session_subagents.rebuild_replay.copied") {
			return nil
		}
		// The steps' connection: the reconcile's one backend that does not
		// hold the advisory lock (the lock's transaction). A connection the
		// pool closed a moment ago may still be listed until its backend
		// exits.
		var pids []int
		if err := poll(func() (bool, error) {
			var err error
			pids, err = pidsOf(db, `SELECT pid FROM pg_stat_activity WHERE application_name = $1
 AND pid NOT IN (SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted)`, app)
			return len(pids) == 1, err
		}); err != nil {
			return fmt.Errorf("the reconcile's backends besides the lock's: %v, want the steps' alone: %w", pids, err)
		}
		stepsPID = pids[0]
		if lock, err = holder.BeginTx(ctx, nil); err != nil {
			return err
		}
		// SHARE ROW EXCLUSIVE conflicts with the SHARE lock CREATE INDEX takes.
		if _, err := lock.Exec(`LOCK TABLE schemastate_new_task_session_subagents IN SHARE ROW EXCLUSIVE MODE`); err != nil {
			return err
		}
		reached = true
		go func() { interfered <- interfere(db, app, stepsPID, lock, &cancelled) }()
		return nil
	})
	rep, err := reconcile.Reconcile(ctx, pool, append(append([]reconcile.Option{}, online...), hook)...)
	require.ErrorIs(t, err, reconcile.ErrStepFailed)
	require.True(t, reached, "the rebuild_index phase was reached: %s", describe(rep))
	require.NoError(t, <-interfered)

	widen := rep.Step(reconcile.StepWiden)
	require.Equal(t, reconcile.Failed, widen.Status, describe(rep))
	require.Contains(t, widen.Detail, "rebuild_index")
	name := regexp.MustCompile(`INDEX IF NOT EXISTS ("[^"]+")`).FindStringSubmatch(cancelled)
	require.NotNil(t, name, "the cancelled build: %s", cancelled)
	require.Contains(t, widen.Detail, name[1], "the failed build is named")
	require.Contains(t, widen.Detail, "canceling statement due to user request")
	require.NotContains(t, describe(rep), "bad connection")
	require.NotContains(t, describe(rep), "connection is already closed")
	for _, s := range []string{reconcile.StepExecutionSince, reconcile.StepBackfill} {
		require.Equal(t, reconcile.Applied, rep.Step(s).Status, "%s ran on the steps' connection: %s", s, describe(rep))
	}
	require.Equal(t, "integer", columnType(t, db, "total_tokens"), "not swapped")

	rep = mustReconcile(t, db)
	require.Contains(t, rep.Step(reconcile.StepWiden).Phases, "task_session_subagents.rebuild_index", "resumed")
	requireAC33(t, db, freshIndexSet(t, db.Dialect))
	requireBackfilledOnceAmong(t, db, 300)
	for _, c := range []string{"total_tokens", "tool_use_count", "duration_ms"} {
		require.Equal(t, "bigint", columnType(t, db, c))
	}
	require.Subset(t, snapshot(t, db), before, "every row, every value")
}

// interfere waits for both builds to wait on the test's lock, cancels the
// one not on the steps' connection, waits for its worker to have stopped
// (its connection closed) and releases the lock.
func interfere(db *dbtest.DB, app string, stepsPID int, lock *sql.Tx, cancelled *string) error {
	defer lock.Rollback()
	var waiting []int
	err := poll(func() (bool, error) {
		var err error
		waiting, err = pidsOf(db, `SELECT l.pid FROM pg_locks l JOIN pg_stat_activity a USING (pid)
 WHERE l.relation = 'schemastate_new_task_session_subagents'::regclass AND NOT l.granted AND a.application_name = $1`, app)
		return len(waiting) == 2, err
	})
	if err != nil {
		return fmt.Errorf("both builds waiting on the lock: %w (waiting: %v)", err, waiting)
	}
	if !slices.Contains(waiting, stepsPID) {
		return fmt.Errorf("builds waiting in %v, none on the steps' connection %d", waiting, stepsPID)
	}
	borrowed := waiting[0]
	if borrowed == stepsPID {
		borrowed = waiting[1]
	}
	if err := db.QueryRow(`SELECT query FROM pg_stat_activity WHERE pid = $1`, borrowed).Scan(cancelled); err != nil {
		return err
	}
	var sent bool
	if err := db.QueryRow(`SELECT pg_cancel_backend($1)`, borrowed).Scan(&sent); err != nil || !sent {
		return fmt.Errorf("cancel the build on %d: sent %v: %w", borrowed, sent, err)
	}
	if err := poll(func() (bool, error) {
		n, err := pidsOf(db, `SELECT pid FROM pg_stat_activity WHERE pid = $1`, borrowed)
		return len(n) == 0, err
	}); err != nil {
		return fmt.Errorf("the borrowed connection closed: %w", err)
	}
	return lock.Rollback()
}

// pidsOf lists the backends q selects, one pid a row.
func pidsOf(db *dbtest.DB, q string, args ...any) ([]int, error) {
	texts, err := readonly.Strings(ctx, db.DB, q, args...)
	if err != nil {
		return nil, err
	}
	pids := make([]int, len(texts))
	for i, s := range texts {
		if pids[i], err = strconv.Atoi(s); err != nil {
			return nil, err
		}
	}
	return pids, nil
}

// poll checks cond until it holds, for up to 30 s.
func poll(cond func() (bool, error)) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok, err := cond()
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return errors.New("timed out")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
