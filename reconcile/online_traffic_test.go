package reconcile_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/internal/hooks"
	"github.com/schemastate/schemastate/reconcile"
)

// metrics is one row's three metric columns, as text (NULL stays "NULL").
type metrics map[string]string

func readMetrics(t *testing.T, db *sql.DB) metrics {
	t.Helper()
	rows, err := db.Query(`SELECT id, concat_ws('/', coalesce(total_tokens::text, 'NULL'), coalesce(tool_use_count::text, 'NULL'), coalesce(duration_ms::text, 'NULL')) FROM task_session_subagents`)
	require.NoError(t, err)
	defer rows.Close()
	out := metrics{}
	for rows.Next() {
		var id, m string
		require.NoError(t, rows.Scan(&id, &m))
		out[id] = m
	}
	require.NoError(t, rows.Err())
	return out
}

// liveTraffic is what the host's capture does all day while an upgrade runs:
// it merges frames onto existing rows (tool_status, model, updated_at — never
// a metric), deletes rows and inserts new ones. It records which rows it
// deleted and the metrics of the rows it inserted.
type liveTraffic struct {
	db       *sql.DB
	mu       sync.Mutex
	deleted  map[string]bool
	inserted metrics
	// models is the model each updated row was last given.
	models  map[string]string
	updates atomic.Int64
}

// step runs one round: an update of a row chosen by n, every 7th round a
// delete, every 5th an insert.
func (l *liveTraffic) step(ctx context.Context, n, rows int) error {
	id := fmt.Sprintf("g%d", n%rows+1)
	if _, err := l.db.ExecContext(ctx, `UPDATE task_session_subagents SET tool_status = 'merged', model = 'm' || $2::text, updated_at = now() WHERE id = $1`, id, n); err != nil {
		return fmt.Errorf("update %s: %w", id, err)
	}
	l.updates.Add(1)
	l.mu.Lock()
	l.models[id] = fmt.Sprintf("m%d", n)
	l.mu.Unlock()
	if n%7 == 3 {
		del := fmt.Sprintf("g%d", (n*13)%rows+1)
		if _, err := l.db.ExecContext(ctx, `DELETE FROM task_session_subagents WHERE id = $1`, del); err != nil {
			return fmt.Errorf("delete %s: %w", del, err)
		}
		l.mu.Lock()
		l.deleted[del] = true
		l.mu.Unlock()
	}
	if n%5 == 1 {
		id := fmt.Sprintf("live%d", n)
		if _, err := l.db.ExecContext(ctx, `INSERT INTO task_session_subagents (id, task_session_id, agent_execution_id, task_id, tool_call_id, total_tokens, tool_use_count, duration_ms, observed_at, updated_at)
 VALUES ($1, 's1', 'e1', 'k1', $1, $2, 3, NULL, now(), now())
 ON CONFLICT (task_session_id, agent_execution_id, tool_call_id) DO UPDATE SET updated_at = EXCLUDED.updated_at`, id, 2147483000+n%600); err != nil {
			return fmt.Errorf("insert %s: %w", id, err)
		}
		l.mu.Lock()
		l.inserted[id] = fmt.Sprintf("%d/3/NULL", 2147483000+n%600)
		l.mu.Unlock()
	}
	return nil
}

// The online upgrade under live traffic (issue 21): updates of existing rows'
// non-metric columns, deletes and inserts run throughout — and, so the test
// does not depend on scheduling, a burst of updates of every row after the
// copy's first batch moves every not-yet-copied row past the pages the copy
// walks. The upgrade finishes on that boot, every surviving row keeps its
// metric values, and every row is present.
func TestOnline_UnderLiveUpdatesDeletesInserts(t *testing.T) {
	const rows = 1500
	db := openPostgres(t).Host(t).Legacy(t)
	seedLegacy(t, db)
	seedMany(t, db, rows)
	seedHistory(t, db)
	before := readMetrics(t, db.DB)

	traffic := &liveTraffic{db: db.DB, deleted: map[string]bool{}, inserted: metrics{}, models: map[string]string{}}
	var beforeSwap int64
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var burst atomic.Bool
	// The writer is stopped between rounds, never cancelled mid-statement:
	// a statement cancelled in flight may still have committed, and the
	// checks below must know exactly what the writer did.
	var stopped atomic.Bool
	stop := make(chan struct{})
	keyed := make(chan struct{}) // the three-column key is in place: the writer may upsert on it
	var once sync.Once
	var failures []error
	var fmu sync.Mutex
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-keyed:
		case <-stop:
			return
		}
		for n := 0; !stopped.Load(); n++ {
			if err := traffic.step(context.Background(), n, rows); err != nil {
				fmu.Lock()
				failures = append(failures, err)
				fmu.Unlock()
				return
			}
		}
	}()
	hook := reconcile.WithFailpoint(func(p string) error {
		switch p {
		case hooks.FailpointAfterPhase("task_session_subagents.swap_key"):
			once.Do(func() { close(keyed) })
		case hooks.FailpointAfterPhase("task_session_subagents.rebuild_replay.indexed"):
			beforeSwap = traffic.updates.Load()
		case hooks.FailpointCopyBatch:
			if burst.CompareAndSwap(false, true) {
				// Every row gets a new tuple, at a later ctid.
				_, err := db.DB.Exec(`UPDATE task_session_subagents SET tool_status = 'burst', updated_at = now()`)
				return err
			}
		}
		return nil
	})
	rep, err := reconcile.Reconcile(ctx, db.DB, append(online, hook)...)
	// The writer's upserts go on after the swap, on the new table: a few more
	// rounds than it had done when Reconcile returned.
	atReturn := traffic.updates.Load()
	require.Eventually(t, func() bool {
		fmu.Lock()
		defer fmu.Unlock()
		return traffic.updates.Load() >= atReturn+3 || len(failures) > 0
	}, time.Minute, 5*time.Millisecond)
	stopped.Store(true)
	close(stop)
	wg.Wait()
	require.NoError(t, err, describe(rep))
	require.Empty(t, failures, "the live writer never fails")
	require.True(t, burst.Load(), "the copy ran batches")
	require.Positive(t, traffic.updates.Load(), "the live writer ran")
	require.Contains(t, rep.Step(reconcile.StepWiden).Phases, "task_session_subagents.rebuild_swap", "the rebuild path")
	require.Positive(t, beforeSwap, "the writer's upserts ran before the swap")

	for _, c := range []string{"total_tokens", "tool_use_count", "duration_ms"} {
		require.Equal(t, "bigint", columnType(t, db, c))
	}
	requireAC33(t, db, freshIndexSet(t, db.Dialect))

	after := readMetrics(t, db.DB)
	for id, m := range before {
		if traffic.deleted[id] {
			require.NotContains(t, after, id, "a deleted row stays deleted")
			continue
		}
		require.Contains(t, after, id, "every surviving row is present")
		require.Equal(t, m, after[id], "row %s keeps its metrics", id)
	}
	// Every row holds what the writer last wrote to it (the burst's, for
	// the rows it never updated after).
	models := map[string]sql.NullString{}
	rows2, err := db.Query(`SELECT id, model FROM task_session_subagents`)
	require.NoError(t, err)
	for rows2.Next() {
		var id string
		var m sql.NullString
		require.NoError(t, rows2.Scan(&id, &m))
		models[id] = m
	}
	require.NoError(t, rows2.Err())
	rows2.Close()
	for id, m := range traffic.models {
		if !traffic.deleted[id] {
			require.Equal(t, m, models[id].String, "row %s holds its last update", id)
		}
	}
	for id, m := range traffic.inserted {
		require.Equal(t, m, after[id], "row %s inserted during the upgrade", id)
	}
}

// Nothing an operator added to the table is lost by the rebuild: grants, an
// undeclared partial index and its comment, a comment on the primary key, a
// sequence a column owns, a column's statistics target and planner option, and the declared
// foreign key, carried NOT VALID and validated.
func TestOnline_RebuildCarriesWhatAnOperatorAdded(t *testing.T) {
	db := openPostgres(t).Host(t).Legacy(t)
	seedLegacy(t, db)
	seedMany(t, db, 300)
	role := "schemastate_reader_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	db.Exec(t, `CREATE ROLE `+role)
	t.Cleanup(func() {
		_, _ = db.DB.Exec(`DROP OWNED BY ` + role)
		_, _ = db.DB.Exec(`DROP ROLE ` + role)
	})
	db.Exec(t, `GRANT SELECT, UPDATE ON task_session_subagents TO `+role+`;
CREATE INDEX op_model ON task_session_subagents (model) WHERE model IS NOT NULL;
COMMENT ON INDEX op_model IS 'the ops dashboard';
COMMENT ON CONSTRAINT task_session_subagents_pkey ON task_session_subagents IS 'one row per subagent';
ALTER TABLE task_session_subagents ALTER COLUMN model SET STATISTICS 500;
ALTER TABLE task_session_subagents ALTER COLUMN task_id SET (n_distinct = -0.5);
CREATE SEQUENCE op_seq OWNED BY task_session_subagents.task_id;
SELECT setval('op_seq', 42)`)
	before := snapshot(t, db)
	var oid int
	require.NoError(t, db.QueryRow(`SELECT 'task_session_subagents'::regclass::oid`).Scan(&oid))

	rep := mustReconcile(t, db, online...)
	require.Contains(t, rep.Step(reconcile.StepWiden).Phases, "task_session_subagents.rebuild_swap")
	var after int
	require.NoError(t, db.QueryRow(`SELECT 'task_session_subagents'::regclass::oid`).Scan(&after))
	require.NotEqual(t, oid, after, "the table was rebuilt")
	require.Equal(t, "bigint", columnType(t, db, "total_tokens"))
	require.Subset(t, snapshot(t, db), before)

	require.Equal(t, 1, count(t, db, `SELECT COUNT(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = current_schema() AND c.relname = 'task_session_subagents'
 AND has_table_privilege($1, c.oid, 'SELECT') AND has_table_privilege($1, c.oid, 'UPDATE') AND NOT has_table_privilege($1, c.oid, 'DELETE')`, role), "grants")
	var def, idxComment, keyComment string
	require.NoError(t, db.QueryRow(`SELECT pg_get_indexdef('op_model'::regclass), obj_description('op_model'::regclass, 'pg_class'),
 (SELECT obj_description(oid, 'pg_constraint') FROM pg_constraint WHERE conrelid = 'task_session_subagents'::regclass AND conname = 'task_session_subagents_pkey')`).
		Scan(&def, &idxComment, &keyComment))
	require.Contains(t, def, "(model) WHERE (model IS NOT NULL)")
	require.Equal(t, "the ops dashboard", idxComment)
	require.Equal(t, "one row per subagent", keyComment)
	require.Equal(t, 500, count(t, db, `SELECT attstattarget FROM pg_attribute WHERE attrelid = 'task_session_subagents'::regclass AND attname = 'model'`))
	require.Equal(t, 1, count(t, db, `SELECT COUNT(*) FROM pg_attribute WHERE attrelid = 'task_session_subagents'::regclass AND attname = 'task_id' AND 'n_distinct=-0.5' = ANY(attoptions)`))
	require.Equal(t, 1, count(t, db, `SELECT COUNT(*) FROM pg_constraint WHERE conrelid = 'task_session_subagents'::regclass AND contype = 'f' AND convalidated`))
	require.Equal(t, 42, count(t, db, `SELECT last_value FROM op_seq`), "a sequence the table's column owns survives the old table")
	require.Equal(t, 1, count(t, db, `SELECT COUNT(*) FROM pg_depend WHERE objid = 'op_seq'::regclass AND refobjid = 'task_session_subagents'::regclass AND deptype = 'a'`), "owned by the rebuilt table")
	obs := observeKeyBearing(t, db)
	require.Subset(t, obs.Indexes["task_session_subagents"], append(freshIndexSet(t, db.Dialect), "op_model index(model)"))
	require.Zero(t, count(t, db, `SELECT COUNT(*) FROM pg_class WHERE relname LIKE 'schemastate%'`))
}

// WithOnlineBudget: the boot returns once the budget is spent, between two
// batches of the copy, with the widen step in progress (not failed), the key
// swapped, execution_since written and the backfill done — the end state
// AC-33b observes holds, and the widening is no part of it. Status shows the
// upgrade in flight; a later Reconcile (default options: the catalog says an
// upgrade is in flight) finishes it.
func TestOnline_BudgetReturnsInProgressThenALaterCallFinishes(t *testing.T) {
	db, before := seededOnlineStore(t)
	// Long enough that the phases before the copy (the key's build
	// included) end within it on a loaded machine, so the budget ends
	// inside the copy and not before it.
	const budget = 2 * time.Second
	start := time.Now()
	// The first batch lasts until the budget is spent: the copy is
	// mid-flight when the budget ends.
	slow := reconcile.WithFailpoint(func(p string) error {
		if p == hooks.FailpointCopyBatch {
			for time.Since(start) < budget {
				time.Sleep(time.Millisecond)
			}
		}
		return nil
	})
	rep, err := reconcile.Reconcile(ctx, db.DB, append(online, slow, reconcile.WithOnlineBudget(budget))...)
	took := time.Since(start)
	require.NoError(t, err, describe(rep))
	require.Less(t, took, budget+5*time.Second, "returns at the first batch boundary after the budget")
	widen := rep.Step(reconcile.StepWiden)
	require.Equal(t, reconcile.InProgress, widen.Status, widen.Detail)
	require.Contains(t, widen.Detail, "online budget spent")
	require.Contains(t, widen.Detail, "resumable")
	require.Equal(t, "integer", columnType(t, db, "total_tokens"), "not yet widened")
	require.Equal(t, reconcile.Applied, rep.Step(reconcile.StepExecutionSince).Status)
	require.Equal(t, reconcile.Applied, rep.Step(reconcile.StepBackfill).Status)
	obs := observeKeyBearing(t, db)
	require.NotNil(t, obs.Upgrade, "status shows the upgrade in flight")
	require.Equal(t, "task_session_subagents.rebuild_copy", obs.Upgrade.Next)
	require.Contains(t, strings.Join(obs.Upgrade.Found, " "), "rows copied, page 1 of")
	plan, err := reconcile.Plan(ctx, db.DB)
	require.NoError(t, err)
	require.NotEmpty(t, plan.Resumed(), "plan shows it")

	rep = mustReconcile(t, db)
	require.Equal(t, reconcile.Applied, rep.Step(reconcile.StepWiden).Status)
	require.NotContains(t, rep.Step(reconcile.StepWiden).Phases, "task_session_subagents.rebuild_prepare", "resumed, not restarted")
	require.Equal(t, "bigint", columnType(t, db, "total_tokens"))
	requireAC33(t, db, freshIndexSet(t, db.Dialect))
	requireBackfilledOnceAmong(t, db, 300)
	require.Subset(t, snapshot(t, db), before)
	require.Nil(t, observe(t, db).Upgrade)
	_, err = reconcile.Reconcile(ctx, db.DB, reconcile.WithOnlineBudget(-time.Second))
	require.ErrorIs(t, err, reconcile.ErrInvalidOption)
}

// The swap under a held lock: a host transaction holds ACCESS SHARE on the
// table when the swap begins; the swap's attempt gives up after its short
// lock_timeout (readers queued behind it are released), is retried, and
// succeeds once the reader ends — within the DDL lock budget.
func TestOnline_SwapRetriedUnderAHeldLock(t *testing.T) {
	db := openPostgres(t).Host(t).Legacy(t)
	seedLegacy(t, db)
	seedMany(t, db, 300)
	before := snapshot(t, db)
	other, err := sql.Open("pgx", db.DSN)
	require.NoError(t, err)
	defer other.Close()
	var gaveUp atomic.Bool
	done := make(chan error, 1)
	hold := reconcile.WithFailpoint(func(p string) error {
		if p != hooks.FailpointAfterPhase("task_session_subagents.rebuild_replay.indexed") {
			return nil
		}
		reader, err := other.Begin()
		if err != nil {
			return err
		}
		if _, err := reader.Exec(`SELECT count(*) FROM task_session_subagents`); err != nil {
			return err
		}
		// Release the reader once the swap has queued for its lock and given
		// the attempt up (the lock still held: it can only have timed out).
		go func() {
			defer reader.Rollback()
			waiting := func() (bool, error) {
				var n int
				err := other.QueryRow(`SELECT count(*) FROM pg_locks WHERE relation = 'task_session_subagents'::regclass AND mode = 'AccessExclusiveLock' AND NOT granted`).Scan(&n)
				return n > 0, err
			}
			for _, want := range []bool{true, false} {
				for {
					w, err := waiting()
					if err != nil {
						done <- err
						return
					}
					if w == want {
						break
					}
					time.Sleep(time.Millisecond)
				}
			}
			gaveUp.Store(true)
			done <- nil
		}()
		return nil
	})
	rep, err := reconcile.Reconcile(ctx, db.DB, append(online, hold, reconcile.WithDDLLockAttempt(50*time.Millisecond), reconcile.WithDDLLockTimeout(20*time.Second))...)
	require.NoError(t, <-done)
	require.NoError(t, err, describe(rep))
	require.True(t, gaveUp.Load(), "an attempt gave up under the held lock")
	require.Contains(t, rep.Step(reconcile.StepWiden).Phases, "task_session_subagents.rebuild_swap")
	require.Equal(t, "bigint", columnType(t, db, "total_tokens"))
	require.Subset(t, snapshot(t, db), before)
}

// An operator's index created while a rebuild runs, after its indexes were
// built: the swap finds the table's fingerprint changed and refuses (the
// index would be lost with the old table); the widening, planned again from
// the catalog, abandons that rebuild and starts again on the same boot,
// carrying the index.
func TestOnline_SwapRefusedWhenTheTableChangedThenRebuiltAgain(t *testing.T) {
	db := openPostgres(t).Host(t).Legacy(t)
	seedLegacy(t, db)
	seedMany(t, db, 300)
	before := snapshot(t, db)
	var builds []string
	created := false
	late := reconcile.WithFailpoint(func(p string) error {
		switch {
		case p == hooks.FailpointAfterPhase("task_session_subagents.rebuild_replay.indexed") && !created:
			created = true
			_, err := db.DB.Exec(`CREATE INDEX op_late ON task_session_subagents (model)`)
			return err
		case p == hooks.FailpointAfterPhase("task_session_subagents.rebuild_abandon"):
			plan, err := reconcile.Plan(ctx, db.DB)
			for _, p := range plan.Phases() {
				if p.ID() == "task_session_subagents.rebuild_index" {
					builds = p.SQL
				}
			}
			return err
		}
		return nil
	})
	rep := mustReconcile(t, db, append(online, late)...)
	widen := rep.Step(reconcile.StepWiden)
	require.Contains(t, widen.Detail, "rebuild_swap")
	require.Contains(t, widen.Detail, "changed, since its rebuild began")
	require.Contains(t, widen.Phases, "task_session_subagents.rebuild_abandon")
	require.Contains(t, widen.Phases, "task_session_subagents.rebuild_swap")
	require.Condition(t, func() bool {
		return slices.ContainsFunc(builds, func(s string) bool { return strings.Contains(s, "(model)") })
	}, "the operator's index is among the builds: %v", builds)
	require.Equal(t, "bigint", columnType(t, db, "total_tokens"))
	require.Contains(t, observe(t, db).Indexes["task_session_subagents"], "op_late index(model)", "the operator's index carried")
	require.Subset(t, snapshot(t, db), before)
	require.Zero(t, count(t, db, `SELECT COUNT(*) FROM pg_class WHERE relname LIKE 'schemastate%'`))
}

// A foreign key into the table: a rename would leave it on the old table, so
// the widening takes the column copy, the reason named; the referencing
// table keeps its key.
func TestOnline_ForeignKeyIntoTheTableTakesTheColumnCopy(t *testing.T) {
	db := openPostgres(t).Host(t).Legacy(t)
	seedLegacy(t, db)
	seedMany(t, db, 300)
	db.Exec(t, `CREATE TABLE op_child (subagent_id text REFERENCES task_session_subagents (id));
INSERT INTO op_child VALUES ('g1')`)
	before := snapshot(t, db)
	plan, err := reconcile.Plan(ctx, db.DB, online...)
	require.NoError(t, err)
	ids := phaseIDs(plan.Phases())
	require.Contains(t, ids, "task_session_subagents.widen_copy")
	require.NotContains(t, ids, "task_session_subagents.rebuild_copy")
	rep := mustReconcile(t, db, online...)
	require.Contains(t, rep.Step(reconcile.StepWiden).Detail, "not rebuilt (foreign key op_child_subagent_id_fkey of op_child references it): column copy")
	require.Equal(t, "bigint", columnType(t, db, "total_tokens"))
	require.Equal(t, 1, count(t, db, `SELECT COUNT(*) FROM pg_constraint WHERE conrelid = 'op_child'::regclass AND confrelid = 'task_session_subagents'::regclass AND convalidated`))
	require.Subset(t, snapshot(t, db), before)
}
