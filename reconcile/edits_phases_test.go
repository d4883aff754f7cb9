package reconcile_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/internal/hooks"
	"github.com/schemastate/schemastate/internal/ops"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/reconcile"
)

// Killed after any phase, the next boot continues from what the catalog
// holds: a NOT VALID constraint of the declared name is validated, not
// added again, and the end state is the one a boot that ran through reaches.
func TestEdit_KilledAfterEachPhaseResumes(t *testing.T) {
	eachRecipe(t, func(t *testing.T, e edit, _ *dbtest.DB, phases []ops.Phase) {
		for _, ph := range phases {
			t.Run(ph.Name+"."+ph.Object, func(t *testing.T) {
				db := openPostgres(t)
				declaredStore(t, db, e)
				before := snapshot(t, db)
				_, err := reconcile.Reconcile(ctx, db.DB, editOptions(t, e, failAt(hooks.FailpointAfterPhase(ph.ID())))...)
				require.Error(t, err)
				if ph.Name == ops.PhaseAddNotValid {
					require.Equal(t, []string{e.constraint + " NOT VALID"}, constraints(t, db, e.constraint))
					plan, err := reconcile.Plan(ctx, db.DB, editOptions(t, e)...)
					require.NoError(t, err)
					require.Contains(t, strings.Join(plan.Resumed(), " "), e.constraint)
				}
				if ph.Name == ops.PhaseAddColumn {
					plan, err := reconcile.Plan(ctx, db.DB, editOptions(t, e)...)
					require.NoError(t, err)
					require.Contains(t, strings.Join(plan.Resumed(), " "), "column "+ph.Object+" added, its fill in flight")
				}
				rep := mustReconcile(t, db, editOptions(t, e)...)
				if ph.Kind != ops.KindCheckRows { // a read, run again before what it guards
					for _, id := range rep.Step(reconcile.StepShape).Phases {
						require.NotEqual(t, ph.ID(), id, "a phase done is not run again")
					}
				}
				if e.constraint != "" {
					require.Len(t, constraints(t, db, e.constraint), map[bool]int{true: 0, false: 1}[strings.HasPrefix(e.constraint, "schemastate_nn_")])
				}
				require.Equal(t, before, snapshot(t, db))
				requireConverged(t, db, editOptions(t, e)...)
				requireEditHolds(t, db, e)
			})
		}
	})
}

// eachRecipe runs fn, for each edit with an online recipe, on a PostgreSQL
// store in the declared shape, with the phases a reconcile of the edit plans.
func eachRecipe(t *testing.T, fn func(t *testing.T, e edit, db *dbtest.DB, phases []ops.Phase)) {
	for _, e := range edits {
		if !e.recipe {
			continue
		}
		t.Run(e.name, func(t *testing.T) {
			db := openPostgres(t)
			declaredStore(t, db, e)
			p, err := reconcile.Plan(ctx, db.DB, editOptions(t, e)...)
			require.NoError(t, err)
			require.NotEmpty(t, p.Phases())
			fn(t, e, db, p.Phases())
		})
	}
}

// lockModes are the table-lock modes each lock class allows, weakest first.
var lockModes = map[ops.LockClass][]string{
	ops.LockNone:                 {"AccessShareLock"},
	ops.LockRows:                 {"AccessShareLock", "RowShareLock", "RowExclusiveLock"},
	ops.LockShareUpdateExclusive: {"AccessShareLock", "RowShareLock", "RowExclusiveLock", "ShareUpdateExclusiveLock"},
	ops.LockShareRowExclusive:    {"AccessShareLock", "RowShareLock", "RowExclusiveLock", "ShareUpdateExclusiveLock", "ShareLock", "ShareRowExclusiveLock"},
}

// The locks each phase actually holds, read from pg_locks while its
// transaction is open: none stronger than the plan says.
func TestEdit_PhasesHoldNoStrongerLockThanPlanned(t *testing.T) {
	eachRecipe(t, func(t *testing.T, e edit, db *dbtest.DB, phases []ops.Phase) {
		planned := map[string]ops.Phase{}
		for _, ph := range phases {
			planned[ph.ID()] = ph
		}
		seen := map[string][]string{}
		fp := reconcile.WithFailpoint(func(point string) error {
			id, ok := strings.CutPrefix(point, "held.")
			if !ok {
				return nil
			}
			seen[id] = db.Strings(t, `SELECT DISTINCT l.mode || ' on ' || c.relname FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
 WHERE l.pid <> pg_backend_pid() AND l.granted AND l.locktype = 'relation' AND c.relname IN ('task_session_subagents', 'task_sessions') ORDER BY 1`)
			return nil
		})
		mustReconcile(t, db, editOptions(t, e, fp)...)
		require.NotEmpty(t, seen)
		for id, locks := range seen {
			ph, ok := planned[id]
			require.True(t, ok, "phase %s was planned", id)
			allowed, bounded := lockModes[ph.Lock]
			if !bounded {
				continue // access_exclusive_catalog: any mode, held for a catalog change
			}
			for _, l := range locks {
				mode, _, _ := strings.Cut(l, " on ")
				require.Contains(t, allowed, mode, "phase %s (planned %s) holds %s", id, ph.Lock, l)
			}
			if ph.Name == ops.PhaseValidate {
				require.Contains(t, locks, "ShareUpdateExclusiveLock on task_session_subagents", "the validation is observed")
			}
		}
	})
}

// A type change PostgreSQL makes in the catalog alone is made in place,
// under a catalog-only lock: no rebuild, no column copy. A timestamp gaining
// precision is one (the server's cast reduces to nothing).
func TestEdit_BinaryCoercibleTypeChangeInPlace(t *testing.T) {
	for _, c := range []struct {
		name, live, column, wantType string
		e                            edit
		wantLength                   string
		want                         int
	}{
		{name: "varchar growth", live: `ALTER TABLE task_session_subagents ALTER COLUMN description TYPE varchar(20)`, column: "description", wantType: "character varying",
			e:          edit{name: "varchar_growth", from: "  column \"description\" {\n    type = local.text", to: "  column \"description\" {\n    type = local.pg ? sql(\"varchar(80)\") : local.text"},
			wantLength: "character_maximum_length", want: 80},
		{name: "timestamp precision growth", live: `ALTER TABLE task_session_subagents ALTER COLUMN settled_at TYPE timestamp(3)`, column: "settled_at", wantType: "timestamp without time zone",
			e:          edit{name: "timestamp_precision", from: "  column \"settled_at\" {\n    type = local.timestamp", to: "  column \"settled_at\" {\n    type = local.pg ? sql(\"timestamp(6)\") : local.timestamp"},
			wantLength: "datetime_precision", want: 6},
	} {
		t.Run(c.name, func(t *testing.T) {
			db := openPostgres(t)
			declaredStore(t, db, edit{})
			db.Exec(t, c.live)
			p, err := reconcile.Plan(ctx, db.DB, editOptions(t, c.e)...)
			require.NoError(t, err)
			var got []string
			for _, ph := range p.Phases() {
				got = append(got, fmt.Sprintf("%s %s %s", ph.ID(), ph.Kind, ph.Lock))
			}
			require.Equal(t, []string{"task_session_subagents.alter statements access_exclusive_catalog"}, got)
			before := snapshot(t, db)
			mustReconcile(t, db, editOptions(t, c.e)...)
			require.Equal(t, c.wantType, columnType(t, db, c.column))
			require.Equal(t, c.want, count(t, db, `SELECT `+c.wantLength+` FROM information_schema.columns
 WHERE table_schema = current_schema() AND table_name = 'task_session_subagents' AND column_name = '`+c.column+`'`))
			require.Equal(t, before, snapshot(t, db))
			requireConverged(t, db, editOptions(t, c.e)...)
		})
		// Under the online threshold the same change is the small path's
		// widen phase, which names the catalog-only lock it takes.
		t.Run(c.name+", small table", func(t *testing.T) {
			db := openPostgres(t)
			declaredStore(t, db, edit{})
			db.Exec(t, c.live)
			small := append(editOptions(t, c.e), reconcile.WithOnlineAbove(1<<40))
			p, err := reconcile.Plan(ctx, db.DB, small...)
			require.NoError(t, err)
			var got []string
			for _, ph := range p.Phases() {
				got = append(got, fmt.Sprintf("%s %s %s scans=%t", ph.ID(), ph.Kind, ph.Lock, ph.Scans))
			}
			require.Equal(t, []string{"task_session_subagents.widen statements access_exclusive_catalog scans=false"}, got)
			mustReconcile(t, db, small...)
			require.Equal(t, c.want, count(t, db, `SELECT `+c.wantLength+` FROM information_schema.columns
 WHERE table_schema = current_schema() AND table_name = 'task_session_subagents' AND column_name = '`+c.column+`'`))
			requireConverged(t, db, small...)
		})
	}
}

// A fill covers the rows the host moved while it ran: an update of a row
// the batches have not reached yet writes its new version past the pages
// they cover, still NULL, and the fill covers those pages in turn.
func TestEdit_FillCoversRowsTheHostMovedMeanwhile(t *testing.T) {
	e := edits[3] // volatile_default
	require.Equal(t, "volatile_default", e.name)
	db := openPostgres(t)
	declaredStore(t, db, e)
	seedMany(t, db, 300)
	require.Greater(t, count(t, db, `SELECT (pg_relation_size('task_session_subagents') / current_setting('block_size')::int)::int`), 3)
	moved := 0
	fp := reconcile.WithFailpoint(func(p string) error {
		if p == hooks.FailpointCopyBatch && moved == 0 {
			moved = count(t, db, `WITH u AS (UPDATE task_session_subagents SET description = 'moved' WHERE uid IS NULL RETURNING 1) SELECT count(*)::int FROM u`)
		}
		return nil
	})
	mustReconcile(t, db, editOptions(t, e, fp)...)
	require.Greater(t, moved, 100, "rows not yet filled were moved")
	require.Zero(t, count(t, db, `SELECT COUNT(*) FROM task_session_subagents WHERE uid IS NULL`))
	require.Equal(t, 303, count(t, db, `SELECT COUNT(DISTINCT uid) FROM task_session_subagents`))
	requireConverged(t, db, editOptions(t, e)...)
}
