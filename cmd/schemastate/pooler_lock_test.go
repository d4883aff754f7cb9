package main

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/internal/testkit/pgbouncer"
	"github.com/schemastate/schemastate/internal/testkit/proctest"
	"github.com/schemastate/schemastate/reconcile"
)

// The boot lock behind a real PgBouncer (1.18) in transaction and session
// mode, driven as a host's replicas drive it: separate CLI processes.

// hookedBinary is the CLI built with the schemastate_testhooks tag
// (testhooks_on.go): a binary that can SIGKILL itself at a failpoint.
func hookedBinary(t *testing.T) string {
	t.Helper()
	return proctest.BinaryWithTags(t, "schemastate_testhooks")
}

// seedSubagents fills the pre-amendment table with n rows over many heap
// pages (200-character descriptions), metrics exercising NULL, zero and the
// integer maximum. 2000 rows are about 600 kB: above the default online
// threshold (256 kB), so the reconcile takes the online path.
func seedSubagents(t *testing.T, db *dbtest.DB, n int) {
	t.Helper()
	db.Exec(t, `INSERT INTO task_sessions (id, task_id) VALUES ('s1', 'k1'), ('s2', 'k2')`)
	db.Exec(t, fmt.Sprintf(`INSERT INTO task_session_subagents (id, task_session_id, task_id, tool_call_id, description, is_async, total_tokens, tool_use_count, duration_ms, source, observed_at, updated_at)
 SELECT 'g' || i, CASE WHEN i %% 2 = 0 THEN 's1' ELSE 's2' END, 'k1', 'toolu_g' || i, repeat('x', 200),
   i %% 2, CASE WHEN i %% 7 = 0 THEN NULL ELSE i * 1000 END, CASE WHEN i %% 5 = 0 THEN 0 ELSE i END, CASE WHEN i = 1 THEN 2147483647 ELSE i END,
   'live', timestamp '2026-07-30 00:00:00' + i * interval '1 ms', timestamp '2026-07-30 00:00:00' + i * interval '1 ms'
 FROM generate_series(1, %d) i`, n))
}

// metricRows is every row's id and metric values, in id order.
func metricRows(t *testing.T, db *dbtest.DB) []string {
	t.Helper()
	return db.Strings(t, `SELECT id || '|' || COALESCE(total_tokens::text, 'NULL') || '|' || COALESCE(tool_use_count::text, 'NULL') || '|' || COALESCE(duration_ms::text, 'NULL') || '|' || description
 FROM task_session_subagents ORDER BY id`)
}

// advisoryLocks lists the advisory locks held in the pooler's database,
// read direct.
func advisoryLocks(t *testing.T, p *pgbouncer.Pooler) []string {
	t.Helper()
	return p.Direct.Strings(t, `SELECT pid::text || ' ' || mode FROM pg_locks WHERE locktype = 'advisory'
 AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`)
}

// Eight replicas boot at once through the pooler, on a small pre-amendment
// store and on one above the online threshold: all exit 0, exactly one
// applies the shape and the others apply nothing, the end state holds with
// every row and metric value intact, no advisory lock is left, no server
// connection of the pool carries a lock_timeout, and a later boot with work
// to do — through the pooler and direct — takes the lock at once (a lock
// wait of zero: one attempt).
func TestPooler_EightConcurrentReconcilesOneApplies(t *testing.T) {
	bin := cliBinary(t)
	for _, size := range []struct {
		name string
		rows int
	}{{"small", 20}, {"online", 2000}} {
		t.Run(size.name, func(t *testing.T) {
			eachPoolMode(t, func(t *testing.T, p *pgbouncer.Pooler) {
				p.Direct.Host(t).Legacy(t)
				seedSubagents(t, p.Direct, size.rows)
				before := metricRows(t, p.Direct)
				const n = 8
				results := make([]childResult, n)
				var wg sync.WaitGroup
				for i := range results {
					wg.Add(1)
					go func() {
						defer wg.Done()
						results[i] = runCLI(t, bin, nil, "reconcile", "--db", p.DSN, "--json")
					}()
				}
				wg.Wait()
				applied, online := 0, false
				for i, r := range results {
					require.Equal(t, exitOK, r.code, "replica %d: %s%s", i, r.out, r.stderr)
					var rep reconcile.Report
					decodeJSON(t, r.out, &rep, r.out)
					require.Equal(t, "advisory_xact", rep.Lock)
					if rep.Step(reconcile.StepShape).Status == reconcile.Applied {
						applied++
						online = strings.Contains(r.out, "online phases")
						continue
					}
					for _, s := range rep.Steps {
						if s.Name != reconcile.StepLock {
							require.NotEqual(t, reconcile.Applied, s.Status, "replica %d applied %s: %s", i, s.Name, r.out)
						}
					}
				}
				require.Equal(t, 1, applied, "exactly one replica applies the shape")
				require.Equal(t, size.rows > 1000, online, "the path the size chooses")
				requireReconciled(t, p.Direct)
				code, out, stderr := cli(t, "status", "--db", p.DSN, "--json")
				require.Equal(t, exitOK, code, stderr)
				var st struct{ Lock string }
				decodeJSON(t, out, &st, out)
				require.Equal(t, "advisory_xact", st.Lock, "status names the lock")
				require.Equal(t, before, metricRows(t, p.Direct), "every row and metric value intact")
				require.Empty(t, advisoryLocks(t, p), "no advisory lock left")
				requireDefaultLockTimeout(t, p)

				for _, dsn := range []string{p.DSN, p.Direct.CLIDSN} {
					idx := p.Direct.Strings(t, `SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() AND tablename = 'task_session_subagents'
 AND indexdef NOT LIKE 'CREATE UNIQUE%' ORDER BY 1 LIMIT 1`)
					require.Len(t, idx, 1)
					p.Direct.Exec(t, `DROP INDEX `+idx[0])
					code, out, stderr := cli(t, "reconcile", "--db", dsn, "--lock-wait", "0s", "--json")
					require.Equal(t, exitOK, code, "a later boot is not held up: %s%s", out, stderr)
					var rep reconcile.Report
					decodeJSON(t, out, &rep, out)
					require.Equal(t, reconcile.Applied, rep.Step(reconcile.StepShape).Status, "the boot had work to do: %s", out)
					require.Empty(t, advisoryLocks(t, p))
				}
				requireReconciled(t, p.Direct)
			})
		})
	}
}

// A replica SIGKILLed mid-upgrade (after its first online phase committed,
// the lock held) leaves a lock the server ends with its connection — direct,
// and through the pooler, which closes the server connection its client
// left mid-transaction — and the next boot converges, rows intact.
func TestPooler_ReplicaKilledMidUpgradeThenNextBootConverges(t *testing.T) {
	bin := hookedBinary(t)
	for _, mode := range poolModes {
		for _, via := range []string{"pooled", "direct"} {
			t.Run(string(mode)+"/"+via, func(t *testing.T) {
				p := pgbouncer.Start(t, pgbouncer.Options{Mode: mode})
				dsn := p.DSN
				if via == "direct" {
					dsn = p.Direct.CLIDSN
				}
				p.Direct.Host(t).Legacy(t)
				seedSubagents(t, p.Direct, 2000)
				before := metricRows(t, p.Direct)

				r := runCLI(t, bin, []string{"SCHEMASTATE_TEST_KILL_AT=phase."}, "reconcile", "--db", dsn, "--json")
				killed := time.Now()
				require.Equal(t, -1, r.code, "killed by a signal: %s%s", r.out, r.stderr)
				require.Eventually(t, func() bool { return len(advisoryLocks(t, p)) == 0 }, 30*time.Second, time.Millisecond,
					"the server ends the dead replica's lock")
				t.Logf("lock free %s after the SIGKILL was seen", time.Since(killed).Round(time.Millisecond))
				code, _, _ := cli(t, "plan", "--db", p.Direct.CLIDSN)
				require.Equal(t, exitChangesPending, code, "killed part way: work remains")

				start := time.Now()
				res := runCLI(t, bin, nil, "reconcile", "--db", dsn, "--json")
				require.Equal(t, exitOK, res.code, res.out+res.stderr)
				var rep reconcile.Report
				decodeJSON(t, res.out, &rep, res.out)
				t.Logf("next boot %s, lock step: %s", time.Since(start).Round(time.Millisecond), rep.Step(reconcile.StepLock).Detail)
				requireReconciled(t, p.Direct)
				require.Equal(t, before, metricRows(t, p.Direct), "every row and metric value intact")
				require.Empty(t, advisoryLocks(t, p))
			})
		}
	}
}

// Behind a statement-mode pooler the reconcile cannot hold its lock (a
// transaction of more than one statement is refused): it refuses, naming
// the pooler, changes nothing, and exits non-zero.
func TestPooler_StatementModeRefusesNamingThePooler(t *testing.T) {
	p := pgbouncer.Start(t, pgbouncer.Options{Mode: pgbouncer.Statement})
	p.Direct.Host(t).Legacy(t)
	seedSubagents(t, p.Direct, 20)
	before := metricRows(t, p.Direct)
	code, out, stderr := cli(t, "reconcile", "--db", p.DSN, "--json")
	require.Equal(t, exitStepFailed, code, out+stderr)
	var rep reconcile.Report
	decodeJSON(t, out, &rep, out)
	lock := rep.Step(reconcile.StepLock)
	require.Equal(t, reconcile.Failed, lock.Status, out)
	require.Contains(t, lock.Detail, "statement-mode connection pooler")
	require.Contains(t, lock.Detail, "transaction blocks not allowed in statement pooling mode")
	require.Contains(t, stderr, "statement-mode connection pooler", "the WARN names it")
	code, _, _ = cli(t, "plan", "--db", p.Direct.CLIDSN)
	require.Equal(t, exitChangesPending, code, "nothing changed")
	require.Equal(t, before, metricRows(t, p.Direct))
	require.Empty(t, advisoryLocks(t, p))
}
