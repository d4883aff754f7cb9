package capture_test

import (
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/capture"
	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/dbtest"
	"github.com/schemastate/schemastate/keys"
)

// AC-1a (revision 3): observed_at is the observation time of the frame that
// CREATED the row, never the minimum of the observations seen. A frame
// observed later but committed first creates the row; the frame observed
// earlier, committed second, merges and leaves observed_at alone. An upsert
// that kept LEAST(stored, excluded) — what AC-1a forbids — would move it back
// to the earlier observation.
func TestRecord_AC1a_LaterObservedFrameCommittedFirstKeepsItsObservation(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		s := newStore(t, db)
		later, earlier := at(5*time.Second), at(0)
		s.record(t, frame("toolu_1a", later, func(f *capture.Frame) { f.Subagent.SubagentType = "reviewer" }))
		s.record(t, frame("toolu_1a", earlier, func(f *capture.Frame) { f.Subagent.Model = "m-2" }))
		r := s.one(t, execE, "toolu_1a")
		require.True(t, r.ObservedAt.Equal(later), "observed_at is the creating frame's: want %s, got %s", later, r.ObservedAt)
		require.Equal(t, "m-2", *r.Model, "the second frame did merge")
	})
}

// AC-31: the writer names agent_execution_id in every insert, writing
// 'unknown' itself for a frame without one — it never leaves the value to the
// column's DEFAULT. Run against a table whose column has no default (as a
// host's hand-made table might), an insert that omitted the column would fail
// NOT NULL instead of writing the row.
func TestRecord_AC31_InsertNamesExecutionIDWithoutTheDefault(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		s := newStore(t, db)
		dropExecutionDefault(t, db)
		s.record(t,
			frame("toolu_nodefault_u", at(0), func(f *capture.Frame) { f.ExecutionID = "" }),
			frame("toolu_nodefault_e", at(0)))
		require.Equal(t, capture.UnknownExecution, s.one(t, capture.UnknownExecution, "toolu_nodefault_u").AgentExecutionID)
		require.Equal(t, execE, s.one(t, execE, "toolu_nodefault_e").AgentExecutionID)
		require.Equal(t, capture.Counters{Attempted: 2, Persisted: 2, UnknownExecution: 1}, s.w.Counters())
	})
}

// dropExecutionDefault removes agent_execution_id's DEFAULT, keeping NOT NULL
// and every index. SQLite cannot alter a default: the (still empty) table is
// created again from its stored SQL without it.
func dropExecutionDefault(t *testing.T, db *dbtest.DB) {
	t.Helper()
	if db.Dialect == dialect.Postgres {
		db.Exec(t, `ALTER TABLE task_session_subagents ALTER COLUMN agent_execution_id DROP DEFAULT`)
		return
	}
	def := regexp.MustCompile("(?i)([`\"]?agent_execution_id[`\"]?\\s+\\w+\\s+NOT NULL)\\s+DEFAULT\\s+\\(?'unknown'\\)?")
	db.RecreateSQLiteTable(t, "task_session_subagents", func(create string) string {
		require.Regexp(t, def, create)
		return def.ReplaceAllString(create, "$1")
	})
	var after string
	require.NoError(t, db.QueryRow(`SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'task_session_subagents'`).Scan(&after))
	require.NotRegexp(t, `(?i)DEFAULT\s+\(?'unknown'`, after)
}

// Failure modes, "A turn row is deleted": the subagent rows of that turn
// survive with their turn_id, because turn_id carries no foreign key — the
// measurement outlives the turn row (spec: turn_id has no FK, by design).
func TestRecord_FailureMode_TurnDeletedRowsSurvive(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		s := newStore(t, db)
		ts := keys.RowTime(db.Dialect, at(0))
		_, err := db.DB.Exec(db.Q(`INSERT INTO task_session_turns (id, task_session_id, task_id, started_at, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?)`),
			turn1, sessA, taskA, ts, ts, ts)
		require.NoError(t, err)
		s.record(t, frame("toolu_t1", at(0)), frame("toolu_t2", at(1), func(f *capture.Frame) { f.ToolStatus = "completed" }))
		before := s.rows(t, sessA)
		require.Len(t, before, 2)

		res, err := db.DB.Exec(db.Q(`DELETE FROM task_session_turns WHERE id = ?`), turn1)
		require.NoError(t, err)
		n, err := res.RowsAffected()
		require.NoError(t, err)
		require.EqualValues(t, 1, n, "the turn row was there and is gone")

		require.Equal(t, before, s.rows(t, sessA), "every subagent row of the deleted turn is intact, turn_id included")
		require.Equal(t, 2, s.count(t, "turn_id = ?", turn1))
	})
}
