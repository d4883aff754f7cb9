package main

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/internal/testkit/dbtest"
)

func TestCLI_ReconcilePlanStatus(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		db.Host(t).Legacy(t)

		code, out, _ := cli(t, "plan", "--db", db.CLIDSN, "--json")
		require.Equal(t, exitChangesPending, code)
		var plan struct{ Statements, Refused []string }
		decodeJSON(t, out, &plan)
		require.NotEmpty(t, plan.Statements)
		require.Empty(t, plan.Refused)

		code, out, stderr := cli(t, "reconcile", "--db", db.CLIDSN, "--json")
		require.Equal(t, exitOK, code, stderr)
		var rep struct {
			Dialect string
			Steps   []struct {
				Name, Status string
				Statements   int
			}
			EndState map[string]bool    `json:"end_state"`
			Keys     map[string]*string `json:"keys"`
		}
		decodeJSON(t, out, &rep)
		require.Equal(t, string(db.Dialect), rep.Dialect)
		names := []string{}
		for _, s := range rep.Steps {
			names = append(names, s.Name)
		}
		want := []string{"lock", "host_tables", "shape", "execution_since", "backfill"}
		if db.Dialect == "postgres" {
			// The legacy metrics are integer; the declaration says bigint.
			want = []string{"lock", "host_tables", "shape", "widen", "execution_since", "backfill"}
		}
		require.Equal(t, want, names)
		for _, k := range []string{"execution_column_not_null", "three_column_unique", "two_column_unique_absent", "indexes_match_declaration"} {
			require.True(t, rep.EndState[k], k)
		}
		require.Contains(t, rep.Keys, "subagent_context_capture_since")
		require.NotNil(t, rep.Keys["subagent_context_execution_since"])

		code, out, _ = cli(t, "plan", "--db", db.CLIDSN)
		require.Equal(t, exitOK, code)
		require.Contains(t, out, "no change")

		code, out, _ = cli(t, "status", "--db", db.CLIDSN, "--json")
		require.Equal(t, exitOK, code)
		var st struct {
			State   string
			Indexes map[string][]string
		}
		decodeJSON(t, out, &st)
		require.Len(t, st.Indexes["task_session_subagents"], 4)
	})
}

// CI's parity check: a fresh and a migrated database report identical index
// sets through `status --json`.
func TestCLI_StatusIndexParityFreshAndMigrated(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, migrated *dbtest.DB) {
		migrated.Host(t).Legacy(t)
		fresh := dbtest.Open(t, migrated.Dialect).Host(t)
		indexes := func(db *dbtest.DB) any {
			code, _, stderr := cli(t, "reconcile", "--db", db.CLIDSN)
			require.Equal(t, exitOK, code, stderr)
			_, out, _ := cli(t, "status", "--db", db.CLIDSN, "--json")
			var st struct{ Indexes map[string][]string }
			decodeJSON(t, out, &st)
			return st.Indexes
		}
		require.Equal(t, indexes(fresh), indexes(migrated))
	})
}

func TestCLI_ExitCodes(t *testing.T) {
	t.Run("step failed is 3", func(t *testing.T) {
		db := dbtest.Open(t, "sqlite") // no host tables
		code, out, _ := cli(t, "reconcile", "--db", db.CLIDSN)
		require.Equal(t, exitStepFailed, code)
		require.Contains(t, out, "host tables missing: kandev_meta, task_session_messages, task_sessions")
	})
	t.Run("usage is 2", func(t *testing.T) {
		code, _, _ := cli(t, "reconcile", "--no-such-flag")
		require.Equal(t, exitUsage, code)
		code, _, _ = cli(t, "no-such-command")
		require.Equal(t, exitUsage, code)
	})
	t.Run("unreachable database is 2 and never prints the password", func(t *testing.T) {
		code, out, stderr := cli(t, "reconcile", "--db", "postgres://alice:s3cretpw@127.0.0.1:1/nope?connect_timeout=2")
		require.Equal(t, exitUsage, code)
		require.Contains(t, stderr, "cannot reach")
		require.NotContains(t, stderr+out, "s3cretpw")
	})
	t.Run("a malformed URL is 2 and prints no byte of its password", func(t *testing.T) {
		for dsn, parts := range map[string][]string{
			"postgres://alice:pa%ZZss@127.0.0.1:1/nope": {"ZZ", "pa%", "ss@"},
			"postgres://alice:qx/jv@127.0.0.1:1/nope":   {"qx", "jv"},
			"postgres://alice:42/jv@127.0.0.1:1/nope":   {"42", "jv"},
		} {
			code, out, stderr := cli(t, "reconcile", "--db", dsn)
			require.Equal(t, exitUsage, code, dsn)
			require.Contains(t, stderr, "not a valid PostgreSQL URL", dsn)
			for _, p := range parts {
				require.NotContains(t, stderr+out, p, dsn)
			}
		}
	})
}

func TestCLI_DemoSeedsAndReconciles(t *testing.T) {
	db := dbtest.Open(t, "sqlite")
	// The first run seeds and reconciles; the second finds the store made.
	for _, wants := range [][]string{
		{"seeded", "rebuilt task_session_subagents"},
		{"already has host tables", "declared shape holds"},
	} {
		code, out, stderr := cli(t, "demo", "--db", db.CLIDSN)
		require.Equal(t, exitOK, code, stderr)
		for _, want := range wants {
			require.Contains(t, out, want)
		}
	}
}

// A mistyped SQLite path is an error, never a new empty database.
func TestCLI_MissingSQLiteFileIsAnError(t *testing.T) {
	path := t.TempDir() + "/typo.db"
	for _, cmd := range []string{"reconcile", "plan", "status", "health"} {
		code, _, stderr := cli(t, cmd, "--db", "sqlite:"+path)
		require.Equal(t, exitUsage, code, cmd)
		require.Contains(t, stderr, "no such database file", cmd)
		_, err := os.Stat(path)
		require.True(t, os.IsNotExist(err), "%s created %s", cmd, path)
	}
}

// An operator's index is listed by plan and status, kept by reconcile, and
// dropped only by reconcile --prune (issue 11 item 5).
func TestCLI_DriftListedKeptAndPrunedOnRequest(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		reconciledByCLI(t, db)
		db.Exec(t, `CREATE INDEX idx_host_model ON task_session_subagents(model)`)
		type drift struct{ Table, Kind, Name string }
		var out struct {
			Statements []string
			Drift      []drift
		}
		wantDrift := []drift{{"task_session_subagents", "index", "idx_host_model"}}

		code, stdout, _ := cli(t, "plan", "--db", db.CLIDSN, "--json")
		require.Equal(t, exitOK, code, "kept drift is no pending change")
		decodeJSON(t, stdout, &out)
		require.Empty(t, out.Statements)
		require.Equal(t, wantDrift, out.Drift)

		out.Drift = nil
		code, stdout, _ = cli(t, "status", "--db", db.CLIDSN, "--json")
		require.Equal(t, exitOK, code)
		decodeJSON(t, stdout, &out)
		require.Equal(t, wantDrift, out.Drift)

		code, stdout, stderr := cli(t, "reconcile", "--db", db.CLIDSN)
		require.Equal(t, exitOK, code, stderr)
		require.Contains(t, stdout, "undeclared (kept unless --prune): task_session_subagents.idx_host_model index")
		require.Contains(t, stderr, "idx_host_model", "the WARN names it")
		code, stdout, _ = cli(t, "plan", "--db", db.CLIDSN, "--prune")
		require.Equal(t, exitChangesPending, code)
		require.Contains(t, stdout, "idx_host_model")

		code, _, stderr = cli(t, "reconcile", "--db", db.CLIDSN, "--prune")
		require.Equal(t, exitOK, code, stderr)
		code, stdout, _ = cli(t, "status", "--db", db.CLIDSN, "--json")
		require.Equal(t, exitOK, code)
		out.Drift = nil
		decodeJSON(t, stdout, &out)
		require.Empty(t, out.Drift)
	})
}

// status prints the same text at every run: the owned tables' index sets in
// table-name order (it ranged over a map, so the two tables swapped places
// from one run to the next).
func TestCLI_StatusTextIsTheSameAtEveryRun(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		reconciled(t, db)
		// Several entries per table: an undeclared index beside the declared ones.
		db.Exec(t, `CREATE INDEX idx_host_model ON task_session_subagents (model)`)
		code, first, stderr := cli(t, "status", "--db", db.CLIDSN)
		require.Equal(t, exitOK, code, stderr)
		var tables []string
		for _, line := range strings.Split(first, "\n") {
			if name, ok := strings.CutPrefix(line, "indexes on "); ok {
				tables = append(tables, strings.TrimSuffix(name, ":"))
			}
		}
		require.Equal(t, []string{"background_agent_log", "task_session_subagents"}, tables, first)
		for range 20 {
			_, again, _ := cli(t, "status", "--db", db.CLIDSN)
			require.Equal(t, first, again)
		}
	})
}
