package bench_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/bench"
	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/dbtest"
	"github.com/schemastate/schemastate/keys"
	"github.com/schemastate/schemastate/reconcile"
)

// tiny is the CI configuration: the full reference population in a 2 MiB
// store, one run each, a few frames. The full-scale numbers are for
// docs/benchmarks.md, never for go test; no test asserts a target.
func tiny() bench.Config {
	return bench.Config{ScaleMB: 2, Population: 1, Seed: 1, Runs: 1, Frames: 20}
}

func TestRun_EveryMeasurementAgainstItsFloor(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		rep, err := bench.Run(ctx, db.DB, tiny())
		require.NoError(t, err)
		require.Equal(t, db.Dialect, rep.Dialect)
		require.Equal(t, 253, rep.Subagents)
		want := []string{bench.Rebuild, bench.Health, bench.SteadyState, bench.Capture, bench.Backfill}
		if db.Dialect == dialect.Postgres {
			want[0] = bench.ConstraintSwap
		}
		var got []string
		for _, m := range rep.Measurements {
			got = append(got, m.Name)
			require.Len(t, m.OursRuns, 1, m.Name)
			require.Len(t, m.FloorRuns, 1, m.Name)
			require.Positive(t, m.Ours, m.Name)
			require.Positive(t, m.Floor, m.Name)
			require.InDelta(t, float64(m.Ours)/float64(m.Floor), m.Ratio, 1e-9, m.Name)
			require.NotEmpty(t, m.FloorIs, m.Name)
			if m.Target > 0 {
				require.NotNil(t, m.Met, m.Name)
			}
		}
		require.Equal(t, want, got)

		// The steady-state boot ran no DDL (AC-18: a second reconcile leaves
		// the schema unchanged) — observed, not assumed.
		steady := rep.Measurement(bench.SteadyState)
		require.NotNil(t, steady.ZeroDDL)
		require.True(t, *steady.ZeroDDL, steady.Detail)
		require.Contains(t, rep.Measurement(bench.Backfill).Detail, "253 rows")

		if db.Dialect == dialect.Postgres {
			require.NotNil(t, rep.Lock)
			require.Positive(t, rep.Lock.HeldMedian, "the pg_locks poller saw the swap's ACCESS EXCLUSIVE lock")
			require.Positive(t, rep.Lock.ReaderQueries)
			require.Positive(t, rep.Lock.ReaderWorst)
		} else {
			require.Nil(t, rep.Lock)
		}
		require.Positive(t, rep.Memory.HeapInusePeak)

		// The store is left reconciled and activated; the snapshot is gone.
		obs, err := reconcile.Observe(ctx, db.DB)
		require.NoError(t, err)
		require.True(t, obs.EndState.KeyBearing())
		require.Equal(t, keys.Activated, obs.State)
		var n int
		require.NoError(t, db.QueryRow(`SELECT COUNT(*) FROM task_session_subagents`).Scan(&n))
		require.Equal(t, 253, n, "the last backfill left every invocation, and capture runs cleaned up after themselves")
		for _, tbl := range []string{"schemastate_bench_legacy_rows", "schemastate_bench_new"} {
			var exists bool
			q := `SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE name = ?)`
			if db.Dialect == dialect.Postgres {
				q = `SELECT to_regclass($1) IS NOT NULL`
			}
			require.NoError(t, db.QueryRow(q, tbl).Scan(&exists))
			require.False(t, exists, tbl)
		}
	})
}

func TestRun_RefusesAStoreThatIsNotEmpty(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		db.Host(t).Legacy(t)
		_, err := bench.Run(context.Background(), db.DB, tiny())
		require.Error(t, err)
		require.Contains(t, err.Error(), "already holds a store")
	})
}
