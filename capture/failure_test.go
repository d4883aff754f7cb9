package capture_test

import (
	"context"
	"encoding/json"
	"expvar"
	"log/slog"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/capture"
	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
)

// rejectTrigger makes the database itself refuse any write of tool_call_id
// 'toolu_poison'.
func rejectTrigger(t *testing.T, db *dbtest.DB) {
	t.Helper()
	if db.Dialect == dialect.Postgres {
		_, err := db.DB.Exec(`CREATE FUNCTION reject_poison() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN IF NEW.tool_call_id = 'toolu_poison' THEN RAISE EXCEPTION 'rejected by trigger'; END IF; RETURN NEW; END $$`)
		require.NoError(t, err)
		_, err = db.DB.Exec(`CREATE TRIGGER reject_poison BEFORE INSERT ON task_session_subagents
			FOR EACH ROW EXECUTE FUNCTION reject_poison()`)
		require.NoError(t, err)
		return
	}
	_, err := db.DB.Exec(`CREATE TRIGGER reject_poison BEFORE INSERT ON task_session_subagents
		WHEN NEW.tool_call_id = 'toolu_poison' BEGIN SELECT RAISE(ABORT, 'rejected by trigger'); END`)
	require.NoError(t, err)
}

// AC-27: a failed write logs WARN with the session and tool-call ids, counts
// failed, and leaves the caller's own write and the writer's next frames
// alone. Forced two real ways: a trigger that raises, and the pre-amendment
// table whose two-column key the three-column conflict target cannot match
// (AC-33a's degraded state).
func TestRecord_AC27_FailedWriteWarnsCountsAndNeverBreaksCaller(t *testing.T) {
	mechanisms := map[string]func(t *testing.T, db *dbtest.DB) *store{
		"trigger raises": func(t *testing.T, db *dbtest.DB) *store {
			s := newStore(t, db)
			rejectTrigger(t, db)
			return s
		},
		"pre-amendment table": func(t *testing.T, db *dbtest.DB) *store {
			db.Host(t).Legacy(t)
			return withSessions(t, db)
		},
	}
	for name, setup := range mechanisms {
		t.Run(name, func(t *testing.T) {
			dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
				s := setup(t, db)
				ctx := context.Background()
				// The enclosing message write, which must survive.
				_, err := db.DB.Exec(db.Q(`INSERT INTO task_session_messages (id, task_session_id, task_id, turn_id, content, created_at, updated_at)
					VALUES ('msg-1', ?, ?, ?, 'spawned', CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)`), sessA, taskA, turn1)
				require.NoError(t, err)

				err = s.w.Record(ctx, frame("toolu_poison", at(0)))
				require.Error(t, err)
				require.NotErrorIs(t, err, capture.ErrNoIdentity)

				var warns []map[string]any
				for _, r := range s.log.records(t) {
					if r["level"] == "WARN" {
						warns = append(warns, r)
					}
				}
				require.Len(t, warns, 1)
				require.Equal(t, sessA, warns[0]["session_id"])
				require.Equal(t, "toolu_poison", warns[0]["tool_call_id"])
				require.Equal(t, capture.Counters{Attempted: 1, Failed: 1}, s.w.Counters())

				var msgs int
				require.NoError(t, db.DB.QueryRow(`SELECT COUNT(*) FROM task_session_messages`).Scan(&msgs))
				require.Equal(t, 1, msgs, "the enclosing message write survives")

				// The writer keeps working for frames the database accepts.
				err = s.w.Record(ctx, frame("toolu_fine", at(0)))
				if name == "trigger raises" {
					require.NoError(t, err)
					require.Equal(t, 1, s.count(t, "tool_call_id = 'toolu_fine'"))
					require.NoError(t, s.w.Check(ctx))
				} else {
					require.Error(t, err, "every write fails against the pre-amendment key")
					require.Error(t, s.w.Check(ctx), "Check sees the shape every write would fail on")
				}
			})
		})
	}
}

// Check refuses a database without the declared table, and passes on the
// declared shape (the CLI's pre-flight).
func TestCheck_RequiresDeclaredTable(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		db.Host(t)
		_, err := capture.NewWriter(context.Background(), db.DB, db.Dialect, capture.WithLogger(slog.New(slog.DiscardHandler)))
		require.ErrorIs(t, err, capture.ErrIncompatibleTable, "no table: the writer refuses to start")
		s := newStore(t, db)
		require.NoError(t, s.w.Check(context.Background()))
	})
}

// AC-26: attempted = skipped_no_identity + persisted + failed exactly, with
// anomalous_value, unstorable_text and unknown_execution as qualifiers — per
// Writer and in the process-wide expvar map.
func TestCounters_AC26_Identity(t *testing.T) {
	eachStore(t, func(t *testing.T, s *store) {
		rejectTrigger(t, s.DB)
		globalBefore := expvarCounters(t)
		ctx := context.Background()
		frames := []capture.Frame{
			frame("toolu_1", at(0)),
			frame("toolu_1", at(1)), // merge: persisted again
			frame("toolu_2", at(0), func(f *capture.Frame) { f.ExecutionID = "" }),                   // unknown
			frame("toolu_3", at(0), func(f *capture.Frame) { f.Subagent.TotalTokens = -9 }),          // anomalous
			frame("", at(0), func(f *capture.Frame) { f.Subagent.TotalTokens = -9 }),                 // skipped only
			frame("toolu_4", at(0), func(f *capture.Frame) { f.SessionID = ""; f.ExecutionID = "" }), // skipped only
			frame("toolu_poison", at(0), func(f *capture.Frame) { f.ExecutionID = "" }),              // failed; not written, so not unknown
			frame("toolu_poison", at(0), func(f *capture.Frame) { f.Subagent.DurationMs = -1 }),      // failed + anomalous
			frame("toolu_5", at(0), func(f *capture.Frame) { f.Subagent.Model = "m\x00" }),           // persisted + unstorable
			frame("toolu_poison", at(0), func(f *capture.Frame) { f.Subagent.Model = "m\xff" }),      // failed + unstorable
			frame("toolu_6", at(0), func(f *capture.Frame) { f.TaskID = "k\x00" }),                   // failed only: an identity
		}
		for _, f := range frames {
			_ = s.w.Record(ctx, f)
		}
		want := capture.Counters{Attempted: 11, Persisted: 5, SkippedNoIdentity: 2, Failed: 4, AnomalousValue: 2, UnstorableText: 2, UnknownExecution: 1}
		got := s.w.Counters()
		require.Equal(t, want, got)
		require.Equal(t, got.Attempted, got.SkippedNoIdentity+got.Persisted+got.Failed)
		require.Equal(t, 4, s.count(t, "1 = 1"), "persisted counts writes, not rows")

		globalAfter := expvarCounters(t)
		require.Equal(t, want, capture.Counters{
			Attempted:         globalAfter.Attempted - globalBefore.Attempted,
			Persisted:         globalAfter.Persisted - globalBefore.Persisted,
			SkippedNoIdentity: globalAfter.SkippedNoIdentity - globalBefore.SkippedNoIdentity,
			Failed:            globalAfter.Failed - globalBefore.Failed,
			AnomalousValue:    globalAfter.AnomalousValue - globalBefore.AnomalousValue,
			UnstorableText:    globalAfter.UnstorableText - globalBefore.UnstorableText,
			UnknownExecution:  globalAfter.UnknownExecution - globalBefore.UnknownExecution,
			Retried:           globalAfter.Retried - globalBefore.Retried,
		})
		require.Equal(t, globalAfter, capture.GlobalCounters())
	})
}

// publishCounters publishes the counters the way ExpvarName tells a host to.
var publishCounters sync.Once

// expvarCounters reads the published map the way /debug/vars renders it.
func expvarCounters(t *testing.T) capture.Counters {
	t.Helper()
	publishCounters.Do(func() { expvar.Publish(capture.ExpvarName, capture.CountersVar{}) })
	v := expvar.Get(capture.ExpvarName)
	require.NotNil(t, v, "published under %s", capture.ExpvarName)
	var m map[string]int64
	require.NoError(t, json.Unmarshal([]byte(v.String()), &m))
	require.Len(t, m, 8)
	return capture.Counters{Attempted: m["attempted"], Persisted: m["persisted"], SkippedNoIdentity: m["skipped_no_identity"],
		Failed: m["failed"], AnomalousValue: m["anomalous_value"], UnstorableText: m["unstorable_text"],
		UnknownExecution: m["unknown_execution"], Retried: m["retried"]}
}
