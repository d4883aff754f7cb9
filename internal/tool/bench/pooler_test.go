package bench_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/internal/testkit/pgbouncer"
	"github.com/schemastate/schemastate/internal/tool/bench"
	"github.com/schemastate/schemastate/internal/tool/bench/render"
)

// With a pooler's DSN the rows family also measures the boot, the
// steady-state boot and live capture through PgBouncer in transaction mode
// beside the same direct, in the same run: each has both sides and a ratio.
func TestBench_PoolerMeasuredBesideDirect(t *testing.T) {
	p := pgbouncer.Start(t, pgbouncer.Options{Mode: pgbouncer.Transaction})
	st := bench.PostgresStores(p.Direct.CLIDSN)
	defer st.Close()
	cfg := bench.Config{Rows: []int{300}, RowsStoreMB: 2, Runs: 1, Frames: 20, DiskMB: 8,
		PoolerDSN: dbtest.WithParam(t, p.DSN, "default_query_exec_mode", "exec")}
	rep, err := bench.Run(context.Background(), st, cfg)
	require.NoError(t, err)
	for _, name := range []string{render.PoolerBoot, render.PoolerSteady, render.PoolerCapture, render.PoolerCaptureConcurrent} {
		m := rep.Find(name, render.FamilyRows, 300)
		require.NotNil(t, m, name)
		require.Positive(t, m.Ours, name)
		require.Positive(t, m.Floor, name)
		require.Positive(t, m.Ratio, name)
	}
	require.Contains(t, string(render.Tables(rep, "")), "through PgBouncer (transaction mode) vs direct")
}
