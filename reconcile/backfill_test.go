package reconcile_test

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/hooks"
	"github.com/schemastate/schemastate/internal/instant"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/keys"
	"github.com/schemastate/schemastate/reconcile"
)

// Boot-sequence tests of the backfill step: the guard, the key pair's
// atomicity and repair, retries, and its place after the shape change.

var bfBase = time.Date(2026, 7, 30, 1, 39, 37, 271235000, time.UTC)

// legacySecondKey is exactly what the pre-amendment build wrote (AC-24 point 5).
const legacySecondKey = "2026-07-30T01:39:37Z"

var quiet = reconcile.WithLogger(slog.New(slog.DiscardHandler))

// bfMessage seeds one qualifying subagent_task message for session s (created if absent).
func bfMessage(t *testing.T, db *dbtest.DB, id, s, toolCall string, created time.Time) {
	t.Helper()
	_, err := db.DB.Exec(db.Q(`INSERT INTO task_sessions (id, task_id) VALUES (?, ?) ON CONFLICT (id) DO NOTHING`), s, "k-"+s)
	require.NoError(t, err)
	meta := fmt.Sprintf(`{"tool_call_id":%q,"status":"completed","normalized":{"kind":"subagent_task","subagent_task":{"status":"completed","model":"from-message","total_tokens":42}}}`, toolCall)
	_, err = db.DB.Exec(db.Q(`INSERT INTO task_session_messages (id, task_session_id, task_id, turn_id, content, metadata, created_at, updated_at)
		VALUES (?, ?, ?, 'turn-1', 'x', ?, ?, ?)`), id, s, "k-"+s, meta, instant.RowTime(db.Dialect, created), instant.RowTime(db.Dialect, created))
	require.NoError(t, err)
}

// bfHistory seeds two qualifying messages; the newer is the high-water mark.
func bfHistory(t *testing.T, db *dbtest.DB) (newest time.Time) {
	t.Helper()
	newest = bfBase.Add(2 * time.Hour)
	bfMessage(t, db, "m-a", "s1", "toolu_a", bfBase)
	bfMessage(t, db, "m-b", "s1", "toolu_b", newest)
	return newest
}

// raiseOnInsert installs a trigger that makes every INSERT into table matching
// when (a boolean over NEW, or "") fail inside the database, and returns its remover.
func raiseOnInsert(t *testing.T, db *dbtest.DB, name, table, when string) func() {
	t.Helper()
	var stmts []string
	if db.Dialect == dialect.SQLite {
		cond := ""
		if when != "" {
			cond = "WHEN " + when
		}
		stmts = []string{fmt.Sprintf(`CREATE TRIGGER %s BEFORE INSERT ON %s %s BEGIN SELECT RAISE(ABORT, 'forced failure'); END`, name, table, cond)}
	} else {
		cond := ""
		if when != "" {
			cond = "WHEN (" + when + ")"
		}
		stmts = []string{
			fmt.Sprintf(`CREATE FUNCTION %s_fn() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'forced failure'; END $$`, name),
			fmt.Sprintf(`CREATE TRIGGER %s BEFORE INSERT ON %s FOR EACH ROW %s EXECUTE FUNCTION %s_fn()`, name, table, cond, name),
		}
	}
	for _, s := range stmts {
		_, err := db.DB.Exec(s)
		require.NoError(t, err)
	}
	return func() {
		drop := "DROP TRIGGER " + name
		if db.Dialect == dialect.Postgres {
			drop += " ON " + table
		}
		_, err := db.DB.Exec(drop)
		require.NoError(t, err)
	}
}

func bfRows(t *testing.T, db *dbtest.DB) int {
	return count(t, db, `SELECT COUNT(*) FROM task_session_subagents WHERE source = 'backfill'`)
}

// AC-24c: one case per state of (capture_since, execution_since), each
// constructed by the failure that produces it in the field; the assertion is
// which keys are present and absent — never a row count.
func TestBackfill_AC24c_FourStateMatrix(t *testing.T) {
	cases := []struct {
		name            string
		legacy          bool
		opt             reconcile.Option
		state           keys.State
		capture, exec   bool
		backfillThrough bool
	}{
		{"activated", false, quiet, keys.Activated, true, true, true},
		{"capture_only: execution_since write failed", false, failAt(hooks.FailpointExecutionSinceWrite), keys.CaptureOnly, true, false, true},
		{"execution_only: backfill failed", false, failAt(hooks.FailpointBackfillInserted), keys.ExecutionOnly, false, true, false},
		{"inactive: amendment did not apply", true, failAt(hooks.FailpointShapeApplied), keys.Inactive, false, false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
				db.Host(t)
				if c.legacy {
					db.Legacy(t)
				}
				bfHistory(t, db)
				_, _ = reconcile.Reconcile(ctx, db.DB, c.opt, quiet)
				ks := readKeys(t, db)
				require.Equal(t, c.state, ks.State())
				require.Equal(t, c.capture, ks.CaptureSince != nil, "capture_since present")
				require.Equal(t, c.exec, ks.ExecutionSince != nil, "execution_since present")
				require.Equal(t, c.backfillThrough, ks.BackfillThrough != nil, "backfill_through present (bound to capture_since, AC-24d)")
			})
		})
	}
}

// AC-24a: a backfill INSERT that fails inside the database (a trigger that
// raises) writes neither key and no row, the boot goes on, and the next
// reconcile retries and completes.
func TestBackfill_AC24a_FailedBackfillWritesNoKeyAndRetries(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		db.Host(t)
		mustReconcile(t, db, quiet) // the table, over an empty history
		_, err := db.DB.Exec(db.Q(`DELETE FROM kandev_meta WHERE key IN (?, ?)`), keys.CaptureSince, keys.BackfillThrough)
		require.NoError(t, err)
		newest := bfHistory(t, db)
		remove := raiseOnInsert(t, db, "fail_backfill", "task_session_subagents", "")

		rep, err := reconcile.Reconcile(ctx, db.DB, quiet)
		require.ErrorIs(t, err, reconcile.ErrStepFailed)
		require.Equal(t, reconcile.Failed, rep.Step(reconcile.StepBackfill).Status)
		require.Contains(t, rep.Step(reconcile.StepBackfill).Detail, "forced failure")
		ks := readKeys(t, db)
		require.Nil(t, ks.CaptureSince, "AC-24a: no key after a failed backfill")
		require.Nil(t, ks.BackfillThrough, "AC-24a: no key after a failed backfill")
		require.NotNil(t, ks.ExecutionSince, "the earlier steps still committed")
		require.Zero(t, bfRows(t, db))

		remove()
		rep = mustReconcile(t, db, quiet)
		require.Equal(t, reconcile.Applied, rep.Step(reconcile.StepBackfill).Status, "retried, not skipped")
		require.EqualValues(t, 2, *rep.Step(reconcile.StepBackfill).Rows)
		ks = readKeys(t, db)
		require.Equal(t, instant.Format(newest), *ks.BackfillThrough)
		require.NotNil(t, ks.CaptureSince)
	})
}

// AC-24d atomicity: the second key write failing leaves NEITHER key (and no
// rows), by a failpoint between the writes and by a trigger on kandev_meta
// that refuses the second key.
func TestBackfill_AC24d_SecondKeyWriteFailureLeavesNeither(t *testing.T) {
	mechanisms := map[string]func(t *testing.T, db *dbtest.DB) (reconcile.Option, func()){
		"failpoint between the key writes": func(t *testing.T, db *dbtest.DB) (reconcile.Option, func()) {
			return failAt(hooks.FailpointBackfillFirstKeyWritten), func() {}
		},
		"trigger refusing the second key": func(t *testing.T, db *dbtest.DB) (reconcile.Option, func()) {
			return quiet, raiseOnInsert(t, db, "fail_capture_key", "kandev_meta", "NEW.key = '"+keys.CaptureSince+"'")
		},
	}
	for name, mech := range mechanisms {
		t.Run(name, func(t *testing.T) {
			dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
				db.Host(t)
				newest := bfHistory(t, db)
				opt, remove := mech(t, db)

				rep, err := reconcile.Reconcile(ctx, db.DB, opt, quiet)
				require.ErrorIs(t, err, reconcile.ErrStepFailed)
				require.Equal(t, reconcile.Failed, rep.Step(reconcile.StepBackfill).Status)
				ks := readKeys(t, db)
				require.Nil(t, ks.BackfillThrough, "first key rolled back with the second")
				require.Nil(t, ks.CaptureSince)
				require.Zero(t, bfRows(t, db), "rows rolled back with the keys")

				remove()
				mustReconcile(t, db, quiet)
				ks = readKeys(t, db)
				require.Equal(t, instant.Format(newest), *ks.BackfillThrough)
				require.NotNil(t, ks.CaptureSince)
				require.Equal(t, 2, bfRows(t, db))
			})
		})
	}
}

// AC-24d repair: a partial pair left by the pre-amendment build is completed
// on the next boot — the missing key appears (backfill_through with the true
// high-water mark, not ”), the present one stays byte-identical. Both ways.
func TestBackfill_AC24d_PartialPairRepaired(t *testing.T) {
	for _, present := range []string{keys.CaptureSince, keys.BackfillThrough} {
		t.Run("only "+present, func(t *testing.T) {
			dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
				db.Host(t)
				newest := bfHistory(t, db)
				_, err := keys.WriteOnce(ctx, db.DB, db.Dialect, present, legacySecondKey)
				require.NoError(t, err)

				rep := mustReconcile(t, db, quiet)
				require.Equal(t, reconcile.Applied, rep.Step(reconcile.StepBackfill).Status, "the one-key guard would have skipped")
				ks := readKeys(t, db)
				require.True(t, ks.BackfillDone())
				if present == keys.CaptureSince {
					require.Equal(t, legacySecondKey, *ks.CaptureSince)
					require.Equal(t, instant.Format(newest), *ks.BackfillThrough, "true high-water mark of the source predicate")
				} else {
					require.Equal(t, legacySecondKey, *ks.BackfillThrough)
					_, err := instant.NewBoundary(*ks.CaptureSince)
					require.NoError(t, err)
					require.NotEqual(t, legacySecondKey, *ks.CaptureSince)
				}
				require.Equal(t, 2, bfRows(t, db))
			})
		})
	}
}

// AC-24 point 5: second-precision keys from the pre-amendment build are
// accepted as they are — byte-identical after two reconciles, never "repaired".
func TestBackfill_AC24_LegacySecondPrecisionKeysByteIdentical(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		db.Host(t)
		bfHistory(t, db)
		through := "2026-07-29T23:59:59Z"
		for k, v := range map[string]string{keys.CaptureSince: legacySecondKey, keys.BackfillThrough: through} {
			_, err := keys.WriteOnce(ctx, db.DB, db.Dialect, k, v)
			require.NoError(t, err)
		}
		for i := 0; i < 2; i++ {
			rep := mustReconcile(t, db, quiet)
			require.Equal(t, reconcile.Unchanged, rep.Step(reconcile.StepBackfill).Status)
			ks := readKeys(t, db)
			require.Equal(t, legacySecondKey, *ks.CaptureSince)
			require.Equal(t, through, *ks.BackfillThrough)
		}
	})
}

// AC-24 point 1: backfill_through is derived from the source predicate, so a
// retry whose INSERT is a no-op (AC-22) still publishes the true, non-empty
// value — unchanged, because the key is write-once.
func TestBackfill_AC24_BackfillThroughAcrossRetry(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		db.Host(t)
		newest := bfHistory(t, db)
		rep := mustReconcile(t, db, quiet)
		require.EqualValues(t, 2, *rep.Step(reconcile.StepBackfill).Rows)
		first := readKeys(t, db)
		require.Equal(t, instant.Format(newest), *first.BackfillThrough)

		_, err := db.DB.Exec(db.Q(`DELETE FROM kandev_meta WHERE key = ?`), keys.CaptureSince)
		require.NoError(t, err)
		rep = mustReconcile(t, db, quiet)
		step := rep.Step(reconcile.StepBackfill)
		require.Equal(t, reconcile.Applied, step.Status)
		require.EqualValues(t, 0, *step.Rows, "replay inserted nothing")
		again := readKeys(t, db)
		require.Equal(t, *first.BackfillThrough, *again.BackfillThrough)
		require.NotEmpty(t, *again.BackfillThrough)
		require.NotNil(t, again.CaptureSince)

		rep = mustReconcile(t, db, quiet)
		require.Equal(t, reconcile.Unchanged, rep.Step(reconcile.StepBackfill).Status, "both keys present: guard skips")
	})
}

// AC-24 point 4 through the boot sequence: capture_since is sampled after the
// INSERT completed, not when the step's transaction began. The failpoints
// read the reconcile's own clock (WithClock), which moves on at every
// reading: a key sampled at the step's start, before the INSERT's
// completion, or from another clock, precedes insertDone.
func TestBackfill_AC24_CaptureSinceSampledAfterInsert(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		db.Host(t)
		bfHistory(t, db)
		opts, read := clockAt(hooks.FailpointBackfillMaxTaken, hooks.FailpointBackfillInserted)
		mustReconcile(t, db, append(opts, quiet)...)
		stepBegan, insertDone := read[hooks.FailpointBackfillMaxTaken], read[hooks.FailpointBackfillInserted]
		require.False(t, stepBegan.IsZero())
		cs, err := instant.Parse(*readKeys(t, db).CaptureSince)
		require.NoError(t, err)
		require.False(t, cs.Before(insertDone), "capture_since %s precedes the INSERT's completion %s", cs, insertDone)
	})
}

// AC-33c, AC-22: a pre-amendment table with live rows and capture_since
// absent (an earlier backfill failed). The shape change runs first, so the
// backfill's INSERT — which names agent_execution_id — succeeds on the first
// pass and on every later one; the live row the history also describes is
// neither duplicated nor changed; a second reconcile changes nothing.
func TestBackfill_AC33c_AC22_PreAmendmentTableWithLiveRows(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		db.Host(t).Legacy(t)
		seedLegacy(t, db) // r1 = live (s1, toolu_1), among others
		legacyBefore := snapshot(t, db)
		bfMessage(t, db, "m-1", "s1", "toolu_1", bfBase) // describes r1, with different values
		bfMessage(t, db, "m-9", "s1", "toolu_9", bfBase.Add(time.Minute))

		rep := mustReconcile(t, db, quiet)
		require.Equal(t, reconcile.Applied, rep.Step(reconcile.StepShape).Status)
		require.Equal(t, reconcile.Applied, rep.Step(reconcile.StepBackfill).Status, describe(rep))
		require.EqualValues(t, 1, *rep.Step(reconcile.StepBackfill).Rows)
		ks := readKeys(t, db)
		require.True(t, ks.BackfillDone())
		require.Equal(t, instant.Format(bfBase.Add(time.Minute)), *ks.BackfillThrough)

		require.Equal(t, 1, count(t, db, `SELECT COUNT(*) FROM task_session_subagents WHERE task_session_id = 's1' AND tool_call_id = 'toolu_1'`), "AC-22: not duplicated")
		require.Equal(t, 1, count(t, db, `SELECT COUNT(*) FROM task_session_subagents WHERE tool_call_id = 'toolu_9' AND source = 'backfill' AND agent_execution_id = 'unknown'`))
		_, err := db.DB.Exec(`DELETE FROM task_session_subagents WHERE tool_call_id = 'toolu_9'`)
		require.NoError(t, err)
		require.Equal(t, legacyBefore, snapshot(t, db), "AC-22: every legacy row unchanged, r1 included")
		_, err = db.DB.Exec(db.Q(`DELETE FROM kandev_meta WHERE key IN (?, ?)`), keys.CaptureSince, keys.BackfillThrough)
		require.NoError(t, err)

		// The mirror of the field state again: keys absent, the amended table present.
		for i := 0; i < 2; i++ {
			rep, err := reconcile.Reconcile(ctx, db.DB, quiet)
			require.NoError(t, err, "pass %d: %s", i+1, describe(rep))
		}
		after := snapshot(t, db)
		keysAfter := readKeys(t, db)
		rep = mustReconcile(t, db, quiet)
		require.Equal(t, reconcile.Unchanged, rep.Step(reconcile.StepBackfill).Status)
		require.Equal(t, after, snapshot(t, db), "a further reconcile changes no row")
		require.Equal(t, keysAfter, readKeys(t, db))
		require.Equal(t, 1, count(t, db, `SELECT COUNT(*) FROM task_session_subagents WHERE task_session_id = 's1' AND tool_call_id = 'toolu_1'`))
	})
}

// AC-33c: in a pass where the shape change fails, the backfill does not run
// and writes no key; the next pass applies the shape and then backfills.
func TestBackfill_AC33c_NoBackfillWithoutTheEndState(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		db.Host(t).Legacy(t)
		bfHistory(t, db)
		rep, err := reconcile.Reconcile(ctx, db.DB, failAt(hooks.FailpointShapeApplied), quiet)
		require.ErrorIs(t, err, reconcile.ErrStepFailed)
		require.Equal(t, reconcile.Skipped, rep.Step(reconcile.StepBackfill).Status)
		ks := readKeys(t, db)
		require.Nil(t, ks.CaptureSince)
		require.Nil(t, ks.BackfillThrough)

		rep = mustReconcile(t, db, quiet)
		require.Equal(t, reconcile.Applied, rep.Step(reconcile.StepBackfill).Status)
		require.True(t, readKeys(t, db).BackfillDone())
	})
}
