package main

import (
	"database/sql"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/capture"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/internal/testkit/pgbouncer"
	"github.com/schemastate/schemastate/internal/testkit/proctest"
)

// The CLI behind a real PgBouncer (internal/testkit/pgbouncer: Debian's 1.18, no
// prepared-statement tracking) in both pool modes: what does not depend on
// the boot lock exits as it does direct and writes what it writes direct.

var poolModes = []pgbouncer.Mode{pgbouncer.Transaction, pgbouncer.Session}

func eachPoolMode(t *testing.T, fn func(t *testing.T, p *pgbouncer.Pooler)) {
	for _, mode := range poolModes {
		t.Run(string(mode), func(t *testing.T) { fn(t, pgbouncer.Start(t, pgbouncer.Options{Mode: mode})) })
	}
}

func exitCodes(t *testing.T, dsn string, commands ...string) []int {
	t.Helper()
	var codes []int
	for _, c := range commands {
		code, _, stderr := cli(t, c, "--db", dsn)
		require.Less(t, code, exitUsage, "%s: %s", c, stderr)
		codes = append(codes, code)
	}
	return codes
}

// status, plan and health read the store through the pooler as they do
// direct, before and after a reconcile; each run is a new process's worth of
// connections, handed the server connections the last one used.
func TestPooler_StatusPlanHealthExitAsDirect(t *testing.T) {
	eachPoolMode(t, func(t *testing.T, p *pgbouncer.Pooler) {
		p.Direct.Host(t).Legacy(t)
		reads := []string{"status", "plan", "health", "status", "plan", "health"}
		direct := exitCodes(t, p.Direct.CLIDSN, reads...)
		require.Equal(t, []int{exitOK, exitChangesPending, 1, exitOK, exitChangesPending, 1}, direct)
		require.Equal(t, direct, exitCodes(t, p.DSN, reads...))

		code, _, stderr := cli(t, "reconcile", "--db", p.Direct.CLIDSN)
		require.Equal(t, exitOK, code, stderr)
		direct = exitCodes(t, p.Direct.CLIDSN, reads...)
		require.Equal(t, direct, exitCodes(t, p.DSN, reads...))
		require.Equal(t, exitOK, direct[1], "plan: no change")
	})
}

// demo on an empty database seeds it and reconciles it through the pooler,
// and a second demo (a second boot) finds it done.
func TestPooler_DemoOnEmptyDatabase(t *testing.T) {
	eachPoolMode(t, func(t *testing.T, p *pgbouncer.Pooler) {
		code, out, stderr := cli(t, "demo", "--db", p.DSN)
		require.Equal(t, exitOK, code, out+stderr)
		require.Contains(t, out, "seeded")
		code, out, stderr = cli(t, "demo", "--db", p.DSN)
		require.Equal(t, exitOK, code, out+stderr)
		require.Contains(t, out, "already has host tables")
		requireReconciled(t, p.Direct)
	})
}

// Three boots in a row on a pre-amendment store through transaction
// pooling: the first upgrades it, the next two find it done; afterwards no
// server connection of the pool carries a lock_timeout of the reconcile's.
func TestPooler_ThreeBootsOnPreAmendmentStore(t *testing.T) {
	eachPoolMode(t, func(t *testing.T, p *pgbouncer.Pooler) {
		p.Direct.Host(t).Legacy(t)
		for boot := range 3 {
			code, out, stderr := cli(t, "reconcile", "--db", p.DSN)
			require.Equal(t, exitOK, code, "boot %d: %s%s", boot+1, out, stderr)
		}
		requireReconciled(t, p.Direct)
		requireDefaultLockTimeout(t, p)
	})
}

// requireReconciled: the store is in its declared shape, with its keys.
func requireReconciled(t *testing.T, db *dbtest.DB) {
	t.Helper()
	code, out, stderr := cli(t, "plan", "--db", db.CLIDSN)
	require.Equal(t, exitOK, code, out+stderr)
	code, out, stderr = cli(t, "status", "--db", db.CLIDSN, "--json")
	require.Equal(t, exitOK, code, stderr)
	var st struct {
		Keys map[string]*string `json:"keys"`
	}
	decodeJSON(t, out, &st, out)
	for _, k := range []string{"subagent_context_capture_since", "subagent_context_execution_since"} {
		require.NotNil(t, st.Keys[k], "%s in %s", k, out)
	}
}

// requireDefaultLockTimeout holds every server connection of the pool at
// once (one open transaction per client, as many clients as the pool has
// server connections) and requires each to show the server's default
// lock_timeout.
func requireDefaultLockTimeout(t *testing.T, p *pgbouncer.Pooler) {
	t.Helper()
	var want string
	fresh, err := sql.Open("pgx", p.Direct.DSN)
	require.NoError(t, err)
	defer fresh.Close()
	require.NoError(t, fresh.QueryRow(`SHOW lock_timeout`).Scan(&want))

	db, err := sql.Open("pgx", dbtest.WithParam(t, p.DSN, "default_query_exec_mode", "exec"))
	require.NoError(t, err)
	defer db.Close()
	pids := map[int]bool{}
	var txs []*sql.Tx
	defer func() {
		for _, tx := range txs {
			_ = tx.Rollback()
		}
	}()
	for range pgbouncer.DefaultPoolSize {
		tx, err := db.Begin()
		require.NoError(t, err)
		txs = append(txs, tx)
		var got string
		var pid int
		require.NoError(t, tx.QueryRow(`SELECT current_setting('lock_timeout'), pg_backend_pid()`).Scan(&got, &pid))
		require.Equal(t, want, got, "server connection %d", pid)
		pids[pid] = true
	}
	require.Len(t, pids, pgbouncer.DefaultPoolSize, "every server connection of the pool seen")
}

// subagentRows is every row of the table as text, the generated id and the
// writer's clock (updated_at) left out, in key order.
func subagentRows(t *testing.T, db *sql.DB) []string {
	t.Helper()
	cols := []string{"task_session_id", "task_id", "turn_id", "agent_execution_id", "tool_call_id",
		"parent_tool_call_id", "subagent_type", "description", "agent_id", "child_session_id", "model",
		"agent_status", "tool_status", "is_async", "total_tokens", "tool_use_count", "duration_ms",
		"source", "observed_at", "settled_at"}
	sel := make([]string, len(cols))
	for i, c := range cols {
		sel[i] = "COALESCE(CAST(" + c + " AS TEXT), 'NULL')"
	}
	return dbtest.StringsFrom(t, db, `SELECT `+strings.Join(sel, ` || '|' || `)+` FROM task_session_subagents
		ORDER BY task_session_id, agent_execution_id, tool_call_id`)
}

// Four ingest processes replaying the shipped stream at once through the
// pooler each record every frame (one line is malformed by design, exit 1)
// and leave exactly the rows one direct ingest leaves.
func TestPooler_ConcurrentIngestsLoseNothing(t *testing.T) {
	sessions := map[string]string{"sess-claude": "task-review", "sess-opencode": "task-refactor"}
	direct := dbtest.Open(t, "postgres")
	sessionStore(t, direct, sessions)
	code, _, stderr := ingestCLI(t, "", "--db", direct.CLIDSN, shippedStream)
	require.Equal(t, exitIngestMalformed, code, stderr)
	want := subagentRows(t, direct.DB)
	require.NotEmpty(t, want)

	bin := cliBinary(t)
	eachPoolMode(t, func(t *testing.T, p *pgbouncer.Pooler) {
		sessionStore(t, p.Direct, sessions)
		var wg sync.WaitGroup
		results, errs := make([]proctest.Result, 4), make([]error, 4)
		for i := range results {
			wg.Add(1)
			go func() {
				defer wg.Done()
				results[i], errs[i] = proctest.Run(bin, nil, "ingest", "--db", p.DSN, "--json", shippedStream)
			}()
		}
		wg.Wait()
		for i, r := range results {
			require.NoError(t, errs[i], "ingest %d", i+1)
			require.Equal(t, exitIngestMalformed, r.Code, "ingest %d: %s", i+1, r.Stderr)
			s := decodeSummary(t, r.Stdout)
			require.Equal(t, int64(0), s.Failed, "ingest %d: %s", i+1, r.Stderr)
			require.Equal(t, int64(40), s.Persisted, "ingest %d", i+1)
			require.NotContains(t, r.Stderr, "declared shape")
			require.NotContains(t, r.Stderr, capture.Table+" cannot take")
		}
		require.Equal(t, want, subagentRows(t, p.Direct.DB))
	})
}
