package reconcile_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/reconcile"
)

// BenchmarkSteadyStateBoot times one Reconcile on a store already in shape:
// one created by the reconcile itself, one whose task_session_subagents the
// host's own DDL created (the key as an inline UNIQUE), and one carrying an
// operator's undeclared index. All three take the certified fast path; the
// last two used to repeat the full check at every boot.
//
//	go test -run '^$' -bench SteadyStateBoot -benchtime 200x ./reconcile
func BenchmarkSteadyStateBoot(b *testing.B) {
	stores := map[string]func(b *testing.B, db *dbtest.DB){
		"declared": func(*testing.B, *dbtest.DB) {},
		"host_ddl": func(b *testing.B, db *dbtest.DB) {
			db.Exec(b, hostAmendedDDL(b, "task_session_id, agent_execution_id, tool_call_id"))
		},
		"operator_index": func(b *testing.B, db *dbtest.DB) {
			mustBootB(b, db)
			db.Exec(b, `CREATE INDEX idx_host_model ON task_session_subagents (model)`)
		},
	}
	for _, d := range []dialect.Dialect{dialect.SQLite, dialect.Postgres} {
		for _, name := range []string{"declared", "host_ddl", "operator_index"} {
			b.Run(string(d)+"/"+name, func(b *testing.B) {
				db := dbtest.Open(b, d).Host(b)
				stores[name](b, db)
				for i := 0; i < 3; i++ {
					mustBootB(b, db)
				}
				b.ResetTimer()
				var rep *reconcile.Report
				for i := 0; i < b.N; i++ {
					rep = mustBootB(b, db)
				}
				b.StopTimer()
				b.ReportMetric(boolMetric(rep.Step(reconcile.StepLock).Status == reconcile.Unchanged), "fast-path")
			})
		}
	}
}

func mustBootB(b *testing.B, db *dbtest.DB) *reconcile.Report {
	rep, err := reconcile.Reconcile(ctx, db.DB, quiet)
	require.NoError(b, err)
	return rep
}

func boolMetric(v bool) float64 {
	if v {
		return 1
	}
	return 0
}

// BenchmarkFullCheckBoot times one Reconcile that takes the full check on a
// store already in shape (its certificate deleted before each boot): the
// fixed part every boot with work pays around its statements — evaluating
// schema.hcl, inspecting, diffing and planning, the keys, the certificate.
//
//	go test -run '^$' -bench FullCheckBoot -benchtime 200x ./reconcile
func BenchmarkFullCheckBoot(b *testing.B) {
	for _, d := range []dialect.Dialect{dialect.SQLite, dialect.Postgres} {
		b.Run(string(d), func(b *testing.B) {
			db := dbtest.Open(b, d).Host(b)
			mustBootB(b, db)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				db.Exec(b, `DELETE FROM kandev_meta WHERE key = 'schemastate_shape_certificate'`)
				b.StartTimer()
				if rep := mustBootB(b, db); rep.Step(reconcile.StepLock).Status != reconcile.Applied {
					b.Fatalf("the boot took no full check: %v", rep.Steps)
				}
			}
		})
	}
}
