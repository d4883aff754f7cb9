package bench

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/health"
	"github.com/schemastate/schemastate/internal/instant"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/internal/tool/gen"
	"github.com/schemastate/schemastate/keys"
	"github.com/schemastate/schemastate/reconcile"
)

// The health floor is an independent statement; it is only a floor if it
// computes the same numbers. On a store with a shortfall, an excess and a
// collision — none zero — it must agree with health.Evaluate.
func TestHealthFloor_SameNumbersAsEvaluate(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		_, err := gen.Generate(ctx, db.DB, gen.Config{ScaleMB: 2, Population: 1, Seed: 1, State: gen.Legacy})
		require.NoError(t, err)
		_, err = reconcile.Reconcile(ctx, db.DB)
		require.NoError(t, err)
		b := &bench{db: db.DB, d: db.Dialect}
		ks, err := keys.Read(ctx, db.DB, db.Dialect)
		require.NoError(t, err)
		bound, err := instant.NewBoundary(*ks.CaptureSince)
		require.NoError(t, err)

		// A shortfall: the rows of three messages in the window are gone.
		var ids []string
		rows, err := db.Query(db.Dialect.Rebind(`SELECT id FROM task_session_subagents WHERE observed_at >= ? ORDER BY id LIMIT 3`),
			instant.RowTime(db.Dialect, bound.Time().Add(time.Microsecond)))
		require.NoError(t, err)
		for rows.Next() {
			var id string
			require.NoError(t, rows.Scan(&id))
			ids = append(ids, id)
		}
		require.NoError(t, rows.Close())
		require.Len(t, ids, 3, "the generated store has rows in the window")
		for _, id := range ids {
			_, err := db.DB.Exec(db.Dialect.Rebind(`DELETE FROM task_session_subagents WHERE id = ?`), id)
			require.NoError(t, err)
		}
		// An excess row, and a collision: one tool_call_id in two executions.
		var session, task string
		require.NoError(t, db.QueryRow(`SELECT id, task_id FROM task_sessions ORDER BY id LIMIT 1`).Scan(&session, &task))
		now := instant.RowTime(db.Dialect, time.Now())
		for i, exec := range []string{"00000000-0000-4000-8000-000000000001", "00000000-0000-4000-8000-000000000002"} {
			_, err := db.DB.Exec(db.Dialect.Rebind(`INSERT INTO task_session_subagents (id, task_session_id, task_id, agent_execution_id, tool_call_id, source, observed_at, updated_at)
VALUES (?, ?, ?, ?, 'toolu_no_message', 'live', ?, ?)`), "excess-"+string(rune('a'+i)), session, task, exec, now, now)
			require.NoError(t, err)
		}

		r, err := health.Evaluate(ctx, db.DB)
		require.NoError(t, err)
		require.Positive(t, *r.Shortfall)
		require.Positive(t, *r.Excess)
		require.Positive(t, *r.Collisions)
		q, arg, err := healthFloorQuery(db.Dialect, *ks.CaptureSince)
		require.NoError(t, err)
		got, err := b.healthFloor(ctx, q, arg)
		require.NoError(t, err)
		require.Equal(t, healthCounts{*r.Shortfall, *r.Excess, *r.Collisions}, got)
	})
}
