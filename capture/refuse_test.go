package capture_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/capture"
	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/reconcile"
)

const lastSubagentIndex = "  index \"idx_subagents_turn_id\" {\n    columns = [column.turn_id]\n  }\n"

// writerBreakingEdits are declarations this release's writer cannot write
// every frame to, each with what the refusal must name.
func writerBreakingEdits(t *testing.T) []struct {
	name  string
	src   []byte
	names []string
} {
	return []struct {
		name  string
		src   []byte
		names []string
	}{
		{"turn_id NOT NULL with a default", dbtest.TurnIDNotNull(t),
			[]string{"writer-not-null", "turn_id", "frames that report no turn id"}},
		{"new NOT NULL column", dbtest.EditedSchema(t, lastSubagentIndex, lastSubagentIndex+"  column \"priority\" {\n    type = local.text\n    null = false\n  }\n"),
			[]string{"writer-not-null", "priority", "every insert"}},
		{"check a reported zero breaks", dbtest.EditedSchema(t, lastSubagentIndex, lastSubagentIndex+"  check \"tool_use_count_positive\" {\n    expr = \"tool_use_count > 0\"\n  }\n"),
			[]string{"writer-check", "tool_use_count_positive", "tool-use count of 0"}},
		{"foreign key the child session precedes", dbtest.EditedSchema(t, lastSubagentIndex, lastSubagentIndex+"  foreign_key \"child_session_fk\" {\n    columns     = [column.child_session_id]\n    ref_columns = [table.task_sessions.column.id]\n  }\n"),
			[]string{"writer-foreign-key", "child_session_fk", "child_session_id"}},
		{"unique over part of the conflict target", dbtest.EditedSchema(t, lastSubagentIndex, lastSubagentIndex+"  index \"uq_session_tool_call\" {\n    unique  = true\n    columns = [column.task_session_id, column.tool_call_id]\n  }\n"),
			[]string{"writer-unique", "uq_session_tool_call", "agent_execution_id values"}},
	}
}

// applyBreaking brings db's table to src's shape, as an operator's
// override would (WithAllowWriterBreak), and adds the sessions.
func applyBreaking(t *testing.T, db *dbtest.DB, src []byte) {
	t.Helper()
	db.Host(t)
	rep, err := reconcile.Reconcile(context.Background(), db.DB, reconcile.WithDeclaration(src, "edited.hcl"),
		reconcile.WithAllowWriterBreak(), reconcile.WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err, "%+v", rep)
	withSessions(t, db)
}

// The writer refuses to start, naming the table, the column or constraint
// and the frames that would fail, on a table carrying any edit it would
// fail frames on; no frame is attempted. On both dialects.
func TestNewWriter_RefusesATableThatWouldRejectItsFrames(t *testing.T) {
	for _, e := range writerBreakingEdits(t) {
		t.Run(e.name, func(t *testing.T) {
			dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
				applyBreaking(t, db, e.src)
				w, err := capture.NewWriter(context.Background(), db.DB, db.Dialect, capture.WithLogger(slog.New(slog.DiscardHandler)))
				require.Nil(t, w)
				require.ErrorIs(t, err, capture.ErrIncompatibleTable)
				require.ErrorContains(t, err, capture.Table)
				for _, n := range e.names {
					require.ErrorContains(t, err, n)
				}
			})
		})
	}
}

// The pre-amendment table (the two-column key) and, on PostgreSQL, a key
// whose unique index is INVALID (a failed concurrent build) serve no
// conflict target: the writer refuses to start rather than fail every
// frame with 42P10.
func TestNewWriter_RefusesATableWithoutItsConflictTarget(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		db.Host(t).Legacy(t)
		_, err := capture.NewWriter(context.Background(), db.DB, db.Dialect)
		require.ErrorIs(t, err, capture.ErrIncompatibleTable)
		require.ErrorContains(t, err, "writer-conflict-target")
		// Half-applied, as a boot that failed between adding the column and
		// building the key leaves it: every column there, no key for it.
		db.Exec(t, `ALTER TABLE task_session_subagents ADD COLUMN agent_execution_id TEXT NOT NULL DEFAULT 'unknown'`)
		_, err = capture.NewWriter(context.Background(), db.DB, db.Dialect)
		require.ErrorIs(t, err, capture.ErrIncompatibleTable)
		require.ErrorContains(t, err, "writer-conflict-target")
		require.NotContains(t, err.Error(), "writer-column", "the column is there; the key is what is missing")
	})
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		if db.Dialect != dialect.Postgres {
			return // SQLite has no INVALID index
		}
		s := newStore(t, db)
		require.NoError(t, s.w.Check(context.Background()))
		s.Exec(t, `UPDATE pg_index SET indisvalid = false WHERE indexrelid = 'task_session_subagents_session_execution_tool_call_key'::regclass`)
		err := s.w.Check(context.Background())
		require.ErrorIs(t, err, capture.ErrIncompatibleTable)
		require.ErrorContains(t, err, "no valid unique key")
		// What the refusal stands for: every frame fails there.
		require.Error(t, s.w.Record(context.Background(), frame("toolu_x", at(0))))
	})
}

// A check the contract cannot decide does not refuse the writer: it is
// logged at WARN, naming the constraint, and frames are written.
func TestNewWriter_UndecidedCheckWarnsAndStarts(t *testing.T) {
	src := dbtest.EditedSchema(t, lastSubagentIndex, lastSubagentIndex+"  check \"description_short\" {\n    expr = \"length(description) < 10000\"\n  }\n")
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		applyBreaking(t, db, src)
		s := &store{DB: db, log: &logBuffer{}}
		w := writer(t, db.DB, db.Dialect, s.logger())
		defer w.Close()
		var warned bool
		for _, r := range s.log.records(t) {
			warned = warned || r["level"] == "WARN" && r["constraint"] == "description_short"
		}
		require.True(t, warned, "the undecided check is named at WARN")
		require.NoError(t, w.Record(context.Background(), frame("toolu_ok", at(0))))
	})
}
