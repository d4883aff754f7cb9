package backfill_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/backfill"
	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/hooks"
	"github.com/schemastate/schemastate/internal/instant"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/keys"
	"github.com/schemastate/schemastate/toolstatus"
)

// AC-24f: nothing qualifying → backfill_through is the ” sentinel, which is
// never parsed as an instant; capture_since is still written.
func TestBackfill_AC24f_EmptySentinelWhenNothingMatched(t *testing.T) {
	eachDeclared(t, func(t *testing.T, db *dbtest.DB) {
		seed(t, db, message{ID: "plain", Session: "s1", Task: "task-1", Turn: "t", Created: base, Meta: `{"normalized":{"kind":"text"}}`})
		res := mustRun(t, db)
		require.True(t, res.Ran)
		require.EqualValues(t, 0, res.Inserted)
		ks := keySet(t, db)
		require.NotNil(t, ks.BackfillThrough)
		require.Equal(t, "", *ks.BackfillThrough)
		_, err := instant.NewBoundary(*ks.BackfillThrough)
		require.ErrorIs(t, err, instant.ErrEmptySentinel)
		require.NotNil(t, ks.CaptureSince)
		_, err = instant.NewBoundary(*ks.CaptureSince)
		require.NoError(t, err)
	})
}

// AC-24 points 1, 3, 4: backfill_through is the newest qualifying created_at
// at nanosecond-form precision; capture_since is sampled AFTER the INSERT
// completed and before the key writes (the clock is read between the
// failpoints after the INSERT and after the first key write, and its reading
// is the key), and both are the fixed nine-digit form.
func TestBackfill_AC24_KeyValuesAndSamplingOrder(t *testing.T) {
	eachDeclared(t, func(t *testing.T, db *dbtest.DB) {
		newest := base.Add(3*time.Hour + 7*time.Microsecond)
		seed(t, db,
			message{ID: "a", Session: "s1", Task: "task-1", Turn: "t", Created: base, Meta: subagent("toolu_a", nil, nil)},
			message{ID: "b", Session: "s2", Task: "task-2", Turn: "t", Created: newest, Meta: subagent("toolu_b", nil, nil)},
			// Newer, but missing its task id: outside the predicate, so not the high-water mark.
			message{ID: "c", Session: "s2", Task: "", Turn: "t", Created: newest.Add(time.Hour), Meta: subagent("toolu_c", nil, nil)},
		)
		sampled := time.Date(2026, 8, 1, 12, 0, 0, 0, time.UTC) // a whole second: still nine digits
		var order []string
		res, err := runHooked(t, db,
			func(p string) error {
				order = append(order, p)
				return nil
			},
			backfill.WithClock(func() time.Time {
				order = append(order, "clock")
				return sampled
			}))
		require.NoError(t, err)
		require.Equal(t, []string{hooks.FailpointBackfillMaxTaken, hooks.FailpointBackfillInserted, "clock", hooks.FailpointBackfillFirstKeyWritten}, order)

		ks := keySet(t, db)
		require.Equal(t, instant.Format(newest), *ks.BackfillThrough)
		require.Equal(t, "2026-07-30T04:39:37.271242000Z", *ks.BackfillThrough)
		require.Equal(t, res.CaptureSince, *ks.CaptureSince)
		require.Equal(t, "2026-08-01T12:00:00.000000000Z", *ks.CaptureSince, "AC-24 point 4: the clock's reading after the INSERT")
	})
}

// AC-24d: the guard is BOTH keys. With both present nothing runs, even with
// unbackfilled qualifying messages.
func TestBackfill_AC24d_GuardIsBothKeys(t *testing.T) {
	eachDeclared(t, func(t *testing.T, db *dbtest.DB) {
		seed(t, db, message{ID: "a", Session: "s1", Task: "task-1", Turn: "t", Created: base, Meta: subagent("toolu_a", nil, nil)})
		ctx := context.Background()
		for _, k := range []string{keys.CaptureSince, keys.BackfillThrough} {
			_, err := keys.WriteOnce(ctx, db.DB, db.Dialect, k, "2026-07-30T01:39:37Z")
			require.NoError(t, err)
		}
		res := mustRun(t, db)
		require.False(t, res.Ran)
		require.Empty(t, rows(t, db))
	})
}

// AC-24d (snapshot order): backfill_through never names an instant later than
// the newest message the INSERT covered. A trigger on the target table commits
// a NEWER qualifying message during the INSERT; had the MAX been taken after
// the INSERT it would name that message.
func TestBackfill_AC24d_MaxIsTakenBeforeTheInsert(t *testing.T) {
	eachDeclared(t, func(t *testing.T, db *dbtest.DB) {
		seed(t, db, message{ID: "a", Session: "s1", Task: "task-1", Turn: "t", Created: base, Meta: subagent("toolu_a", nil, nil)})
		late := instant.RowTime(db.Dialect, base.Add(24*time.Hour))
		meta := subagent("toolu_late", nil, nil)
		if db.Dialect == dialect.SQLite {
			_, err := db.DB.Exec(fmt.Sprintf(`CREATE TRIGGER late_message AFTER INSERT ON task_session_subagents BEGIN
				INSERT INTO task_session_messages (id, task_session_id, task_id, turn_id, content, metadata, created_at, updated_at)
				VALUES ('late', 's1', 'task-1', 't', '', '%s', '%s', '%s'); END`, meta, late, late))
			require.NoError(t, err)
		} else {
			_, err := db.DB.Exec(fmt.Sprintf(`CREATE FUNCTION late_message() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
				INSERT INTO task_session_messages (id, task_session_id, task_id, turn_id, content, metadata, created_at, updated_at)
				VALUES ('late', 's1', 'task-1', 't', '', '%s', '%s', '%s'); RETURN NULL; END $$`, meta, late.(time.Time).Format("2006-01-02 15:04:05.999999"), late.(time.Time).Format("2006-01-02 15:04:05.999999")))
			require.NoError(t, err)
			_, err = db.DB.Exec(`CREATE TRIGGER late_message AFTER INSERT ON task_session_subagents FOR EACH STATEMENT EXECUTE FUNCTION late_message()`)
			require.NoError(t, err)
		}
		res := mustRun(t, db)
		require.EqualValues(t, 1, res.Inserted)
		var n int
		require.NoError(t, db.DB.QueryRow(`SELECT COUNT(*) FROM task_session_messages WHERE id = 'late'`).Scan(&n))
		require.Equal(t, 1, n, "the trigger did commit a newer message")
		require.Equal(t, instant.Format(base), *keySet(t, db).BackfillThrough)
	})
}

// AC-24d on PostgreSQL READ COMMITTED: the MAX and the INSERT both read the
// one scan's snapshot. A qualifying message committed by ANOTHER connection
// after that scan — after the MAX, before the INSERT, when a statement of its
// own would see it — is neither inserted nor claimed: the key names exactly
// the newest message the INSERT covered, never a later one. (On SQLite the
// reconciler's BEGIN IMMEDIATE excludes any concurrent writer for the whole
// pass; the trigger test above covers both dialects.)
func TestBackfill_AC24d_ConcurrentCommitNeverAdvancesTheKey(t *testing.T) {
	db := dbtest.Open(t, dialect.Postgres)
	declared(t, db)
	seed(t, db, message{ID: "a", Session: "s1", Task: "task-1", Turn: "t", Created: base, Meta: subagent("toolu_a", nil, nil)})
	var visible int
	res, err := runHooked(t, db, func(p string) error {
		if p != hooks.FailpointBackfillMaxTaken {
			return nil
		}
		// Autocommitted on another pooled connection while Run's transaction is open.
		_, err := db.DB.Exec(`INSERT INTO task_session_messages (id, task_session_id, task_id, turn_id, content, metadata, created_at, updated_at)
			VALUES ('b', 's1', 'task-1', 't', '', $1, $2, $2)`, subagent("toolu_b", nil, nil), instant.RowTime(db.Dialect, base.Add(time.Hour)))
		if err != nil {
			return err
		}
		// Control: committed, so any snapshot taken from here on sees it.
		return db.DB.QueryRow(`SELECT COUNT(*) FROM task_session_messages WHERE id = 'b'`).Scan(&visible)
	})
	require.NoError(t, err)
	require.Equal(t, 1, visible, "the concurrent message was committed before the INSERT ran")
	require.EqualValues(t, 1, res.Inserted, "the INSERT copies the scan's winners, not a later snapshot")
	require.Contains(t, rows(t, db), "toolu_a/unknown")
	require.NotContains(t, rows(t, db), "toolu_b/unknown")
	require.Equal(t, instant.Format(base), *keySet(t, db).BackfillThrough, "the key names the newest message the INSERT covered")
}

// AC-23a: the backfill performs ONE full scan of task_session_messages. On
// PostgreSQL the transaction's own statistics count every scan of the table
// (sequential or index) that Run's statements started; the seed and the
// guard are outside them. There is one, however many messages qualify.
func TestBackfill_AC23a_OneScanOfTheMessages(t *testing.T) {
	db := dbtest.Open(t, dialect.Postgres)
	declared(t, db)
	for i := 0; i < 5; i++ {
		seed(t, db, message{ID: fmt.Sprint("m", i), Session: "s1", Task: "task-1", Turn: "t", Created: base.Add(time.Duration(i) * time.Second), Meta: subagent(fmt.Sprint("toolu_", i%3), nil, nil)})
	}
	seed(t, db, message{ID: "plain", Session: "s1", Task: "task-1", Turn: "t", Created: base, Meta: `{}`})
	ctx := context.Background()
	tx, err := db.DB.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer tx.Rollback() //nolint:errcheck // the test only reads its counters
	scans := func() (n int64) {
		require.NoError(t, tx.QueryRowContext(ctx, `SELECT pg_stat_get_xact_numscans('task_session_messages'::regclass)`).Scan(&n))
		return n
	}
	before := scans()
	res, err := backfill.Run(ctx, tx, db.Dialect)
	require.NoError(t, err)
	require.EqualValues(t, 3, res.Inserted)
	require.Equal(t, instant.Format(base.Add(4*time.Second)), res.BackfillThrough)
	require.EqualValues(t, 1, scans()-before)
}

// AC-24a/AC-24d at the package boundary: any failure returns an error and the
// caller's rollback leaves neither rows nor keys.
func TestBackfill_AC24d_FailureAtEveryPointLeavesNothing(t *testing.T) {
	for _, point := range []string{hooks.FailpointBackfillMaxTaken, hooks.FailpointBackfillInserted, hooks.FailpointBackfillFirstKeyWritten} {
		t.Run(point, func(t *testing.T) {
			eachDeclared(t, func(t *testing.T, db *dbtest.DB) {
				seed(t, db, message{ID: "a", Session: "s1", Task: "task-1", Turn: "t", Created: base, Meta: subagent("toolu_a", nil, nil)})
				boom := errors.New("boom")
				_, err := runHooked(t, db, func(p string) error {
					if p == point {
						return boom
					}
					return nil
				})
				require.ErrorIs(t, err, boom)
				ks := keySet(t, db)
				require.Nil(t, ks.CaptureSince)
				require.Nil(t, ks.BackfillThrough)
				require.Empty(t, rows(t, db))
			})
		})
	}
}

// AC-11: the backfill settles on exactly the live writer's terminal set (its
// SQL is built from toolstatus.SQLList, the list the live writer classifies
// against); pinned here against the classifier itself so the list and the
// function cannot drift apart.
func TestBackfill_AC11_TerminalSetIsTheLiveWritersSet(t *testing.T) {
	require.ElementsMatch(t, []string{"complete", "completed", "success", "error", "failed", "cancelled"}, toolstatus.Terminal)
	for _, s := range toolstatus.Terminal {
		require.True(t, toolstatus.IsTerminal(s), s)
	}
	for _, s := range []string{"pending", "in_progress", "async_launched", "Completed", ""} {
		require.False(t, toolstatus.IsTerminal(s), s)
	}
}

// The scan's winners table (both dialects) and the PostgreSQL metadata guard
// are private temp objects created and dropped by each run; a second run on
// the same session (a pooled connection, with pgx's statement cache) must
// find the new ones, not a stale plan, and none may outlive its run.
func TestBackfill_RepeatedRunsOnOneSession(t *testing.T) {
	eachDeclared(t, func(t *testing.T, db *dbtest.DB) {
		conn, err := db.DB.Conn(context.Background())
		require.NoError(t, err)
		defer conn.Close()
		for i := 0; i < 3; i++ {
			seed(t, db, message{ID: fmt.Sprint("m", i), Session: "s1", Task: "task-1", Turn: "t", Created: base.Add(time.Duration(i) * time.Second), Meta: subagent(fmt.Sprint("toolu_", i), nil, nil)})
			for _, q := range []string{"BEGIN", "DELETE FROM kandev_meta WHERE key <> '" + keys.ExecutionSince + "'"} {
				_, err := conn.ExecContext(context.Background(), q)
				require.NoError(t, err)
			}
			res, err := backfill.Run(context.Background(), conn, db.Dialect)
			require.NoError(t, err, "run %d", i+1)
			require.EqualValues(t, 1, res.Inserted, "run %d", i+1)
			_, err = conn.ExecContext(context.Background(), "COMMIT")
			require.NoError(t, err)
			// The scan's private table is gone with the run, on the session that made it.
			left := `SELECT COUNT(*) FROM sqlite_temp_master WHERE name = 'schemastate_backfill_winners'`
			if db.Dialect == dialect.Postgres {
				// pg_class lists every session's temp tables: a backfill of
				// another test running in the same database is not this run's.
				left = `SELECT COUNT(*) FROM pg_class WHERE relname = 'schemastate_backfill_winners' AND relnamespace = pg_my_temp_schema()`
			}
			var n int
			require.NoError(t, conn.QueryRowContext(context.Background(), left).Scan(&n))
			require.Zero(t, n, "run %d left its temp table", i+1)
		}
	})
}
