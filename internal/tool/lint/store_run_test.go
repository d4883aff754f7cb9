package lint

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate"
	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/ops"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/reconcile"
)

// lint --db STORE plans the declaration on that store as the reconcile will
// (its size chooses the path, so each phase's lock is the one it takes
// there) and counts the rows that would break a NOT NULL, a check, a foreign
// key or a unique key the declaration adds: each is a refused hazard with
// its row count.
func TestLint_Store_CountsTheRowsThatBreakEachChange(t *testing.T) {
	src := string(schemastate.SchemaHCL)
	anchor := "  index \"idx_subagents_session_id\" {"
	edited := strings.Replace(src, "column \"turn_id\" {\n    type = local.text\n    null = true", "column \"turn_id\" {\n    type = local.text\n    null = false", 1)
	edited = strings.Replace(edited, anchor, "  check \"subagents_tokens_nonnegative\" {\n    expr = \"total_tokens >= 0\"\n  }\n"+
		"  foreign_key \"subagents_child_session_fkey\" {\n    columns     = [column.child_session_id]\n    ref_columns = [table.task_sessions.column.id]\n  }\n"+
		"  index \"idx_subagents_task_tool_call\" {\n    unique  = true\n    columns = [column.task_id, column.tool_call_id]\n  }\n"+
		// r1 and r2 share task k1 and a NULL turn_id: a unique index admits
		// both (NULLs are distinct), so no row breaks it.
		"  index \"idx_subagents_task_turn\" {\n    unique  = true\n    columns = [column.task_id, column.turn_id]\n  }\n"+anchor, 1)
	require.NotEqual(t, src, edited)
	ctx := context.Background()
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		db.Host(t)
		_, err := reconcile.Reconcile(ctx, db.DB, reconcile.WithLogger(slog.New(slog.DiscardHandler)))
		require.NoError(t, err)
		db.Exec(t, `INSERT INTO task_sessions (id, task_id) VALUES ('s1', 'k1')`)
		db.Exec(t, `INSERT INTO task_session_subagents (id, task_session_id, task_id, turn_id, agent_execution_id, tool_call_id, total_tokens, child_session_id, observed_at, updated_at) VALUES
 ('r1', 's1', 'k1', NULL, 'e1', 'toolu_1', -1, 'orphan', '2026-07-30 01:00:00', '2026-07-30 01:00:00'),
 ('r2', 's1', 'k1', NULL, 'e2', 'toolu_1', 5, NULL, '2026-07-30 01:00:00', '2026-07-30 01:00:00'),
 ('r3', 's1', 'k1', 't', 'e1', 'toolu_3', 7, NULL, '2026-07-30 01:00:00', '2026-07-30 01:00:00')`)
		cfg := Config{New: Source{HCL: []byte(edited), File: "edited.hcl"}, Dialects: []dialect.Dialect{db.Dialect}, DB: db.CLIDSN,
			Options: []reconcile.Option{reconcile.WithOnlineAbove(0)}}
		rep, err := Lint(ctx, cfg)
		require.NoError(t, err)
		var store *Run
		for i := range rep.Runs {
			if rep.Runs[i].State == StoreState {
				store = &rep.Runs[i]
			}
		}
		require.NotNil(t, store, "the --db store is planned")
		got := map[string]int64{}
		for _, h := range store.Hazards {
			if h.Code == CodeBreakingRows {
				require.Equal(t, LevelRefused, h.Level)
				what, _, _ := strings.Cut(strings.SplitN(h.Detail, " break ", 2)[1], ":")
				got[what] = *h.Rows
			}
		}
		require.Equal(t, map[string]int64{
			"NOT NULL of turn_id":                      2,
			"check subagents_tokens_nonnegative":       1,
			"foreign key subagents_child_session_fkey": 1,
			"unique idx_subagents_task_tool_call":      1,
		}, got)
		require.Equal(t, 1, rep.Exit(LevelRefused))
		if db.Dialect == dialect.Postgres {
			locks := map[string]ops.LockClass{}
			for _, ph := range store.Phases {
				locks[ph.Name+"."+ph.Object] = ph.Lock
			}
			require.Equal(t, ops.LockShareUpdateExclusive, locks["validate.schemastate_nn_turn_id"], "the locks as the reconcile takes them there")
			require.Equal(t, ops.LockShareRowExclusive, locks["add_not_valid.subagents_child_session_fkey"])
			require.Equal(t, ops.LockShareUpdateExclusive, locks["build_index.idx_subagents_task_tool_call"])
		}
	})
}
