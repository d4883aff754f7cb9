package bench_test

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/internal/testkit/proctest"
	"github.com/schemastate/schemastate/internal/tool/bench"
	"github.com/schemastate/schemastate/internal/tool/bench/render"
	"github.com/schemastate/schemastate/reconcile"
)

// tiny is the CI configuration: the same code as a full run, at two small
// table sizes and one small history, one run each, a few frames. The
// full-scale numbers are for docs/benchmarks.md, never for go test; no test
// asserts a target.
func tiny(exe string) bench.Config {
	return bench.Config{Rows: []int{300, 1000}, Messages: []int{4000}, RowsStoreMB: 2, Runs: 1, Frames: 20, DiskMB: 8, Exe: exe}
}

// binary is the CLI, built once, so the runs time it as a child process.
func binary(t *testing.T) string { return proctest.Binary(t) }

func stores(t *testing.T, db *dbtest.DB) bench.Stores {
	if db.Dialect == dialect.Postgres {
		return bench.PostgresStores(db.CLIDSN)
	}
	db.Close()
	return bench.SQLiteStores(strings.TrimPrefix(db.CLIDSN, "sqlite:"))
}

func TestRun_EveryCurveAgainstItsFloorAndAnchors(t *testing.T) {
	exe := binary(t)
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		st := stores(t, db)
		defer st.Close()
		rep, err := bench.Run(ctx, st, tiny(exe))
		require.NoError(t, err)
		require.Equal(t, db.Dialect, rep.Dialect)

		rebuild := render.Rebuild
		anchors := []string{render.AnchorAtlas, render.AnchorHost, render.AnchorCLI, render.AnchorPhysical}
		if db.Dialect == dialect.Postgres {
			rebuild = render.ConstraintSwap
			anchors = []string{render.AnchorAtlas, render.AnchorCLI, render.AnchorPhysical}
		}
		want := map[string][]int{}
		for _, n := range []int{300, 1000} {
			for _, name := range []string{rebuild, render.SteadyState, render.Capture, render.CaptureConcurrent} {
				want[render.FamilyRows+"/"+name] = append(want[render.FamilyRows+"/"+name], n)
			}
		}
		for _, name := range []string{render.Health, render.SteadyState, render.Backfill} {
			want[render.FamilyMessages+"/"+name] = []int{4000}
		}
		got := map[string][]int{}
		for _, m := range rep.Measurements {
			got[m.Family+"/"+m.Name] = append(got[m.Family+"/"+m.Name], m.N)
			require.Len(t, m.OursRuns, 1, m.Name)
			require.Len(t, m.FloorRuns, 1, m.Name)
			require.Positive(t, m.Ours, m.Name)
			require.Positive(t, m.Floor, m.Name)
			require.InDelta(t, float64(m.Ours)/float64(m.Floor), m.Ratio, 1e-9, m.Name)
			require.NotEmpty(t, m.FloorIs, m.Name)
			require.NotEmpty(t, m.OursIs, m.Name)
			if m.Target > 0 {
				require.NotNil(t, m.Met, m.Name)
			}
			for _, a := range m.Anchors {
				require.Empty(t, a.Err, "%s at %d: anchor %s", m.Name, m.N, a.Name)
				require.Positive(t, a.Median, "%s at %d: anchor %s", m.Name, m.N, a.Name)
			}
		}
		require.Equal(t, want, got)

		for _, n := range []int{300, 1000} {
			r := rep.Find(rebuild, render.FamilyRows, n)
			require.Equal(t, n, r.Rows)
			var names []string
			for _, a := range r.Anchors {
				names = append(names, a.Name)
			}
			require.Equal(t, anchors, names, "every anchor ran next to ours and the floor, on the same rows")
			require.Positive(t, r.Bytes)
			require.NotEmpty(t, r.Fixed)

			s := rep.Find(render.SteadyState, render.FamilyRows, n)
			require.Equal(t, n, s.Rows, "the steady-state boot ran on the store of that size")
			require.True(t, *s.ZeroDDL, s.Detail)
		}
		b := rep.Find(render.Backfill, render.FamilyMessages, 4000)
		require.Positive(t, b.Rows)
		require.Contains(t, b.Detail, "rows;")
		h := rep.Find(render.Health, render.FamilyMessages, 4000)
		require.Contains(t, h.Detail, "the same from both sides")

		require.Len(t, rep.Memory, 3)
		for _, m := range rep.Memory {
			require.Positive(t, m.HeapPeak)
		}
		require.Len(t, rep.Disk, 4, "at the start, before each rebuild size, at the end")
		require.Positive(t, rep.Disk[0].BytesPerSec)
		if db.Dialect == dialect.Postgres {
			require.Len(t, rep.Locks, 2)
			require.Positive(t, rep.Locks[0].Held, "the pg_locks poller saw the swap's ACCESS EXCLUSIVE lock")
		}

		// The last store is left reconciled; the working tables are gone.
		reopened := reopen(t, db)
		obs, err := reconcile.Observe(ctx, reopened)
		require.NoError(t, err)
		require.True(t, obs.EndState.KeyBearing())
		var n int
		require.NoError(t, reopened.QueryRow(`SELECT COUNT(*) FROM task_session_subagents`).Scan(&n))
		require.Equal(t, b.Rows, n, "the last backfill left every invocation")

		dir := t.TempDir()
		paths, err := render.WriteFiles(dir, "", rep)
		require.NoError(t, err)
		require.Contains(t, paths, filepath.Join(dir, string(db.Dialect)+"-"+rebuild+"-rows.svg"))
		tables, err := os.ReadFile(filepath.Join(dir, string(db.Dialect)+"-tables.md"))
		require.NoError(t, err)
		require.Contains(t, string(tables), "| 1k |")
	})
}

// reopen opens the test's database again: on SQLite the benchmark replaced
// the file the test's handle had open.
func reopen(t *testing.T, db *dbtest.DB) *sql.DB {
	if db.Dialect == dialect.Postgres {
		return db.DB
	}
	r, err := sql.Open("sqlite", db.DSN)
	require.NoError(t, err)
	t.Cleanup(func() { r.Close() })
	return r
}

func TestRun_RefusesAStoreThatIsNotEmpty(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		db.Host(t).Legacy(t)
		st := stores(t, db)
		defer st.Close()
		_, err := bench.Run(context.Background(), st, tiny(""))
		require.Error(t, err)
		require.Contains(t, err.Error(), "already holds a store")
		var n int
		require.NoError(t, reopen(t, db).QueryRow(`SELECT COUNT(*) FROM task_session_subagents`).Scan(&n), "the store's tables were left alone")
	})
}
