package reconcile_test

import (
	"bytes"
	"log/slog"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/reconcile"
)

// hostConstraints are a host's own foreign key and check on
// task_session_subagents, spelled inside its CREATE TABLE (the only place
// SQLite takes them).
const hostConstraints = `    CONSTRAINT host_turn_fk FOREIGN KEY (turn_id) REFERENCES task_session_turns(id),
    CONSTRAINT host_tokens_check CHECK (total_tokens IS NULL OR total_tokens >= 0),
    FOREIGN KEY (task_session_id)`

// hostIndexes are an operator's indexes: a plain one and a unique one that
// is no spelling of the declared key.
const hostIndexes = `CREATE INDEX idx_host_model ON task_session_subagents(model);
CREATE UNIQUE INDEX idx_host_child ON task_session_subagents(child_session_id)`

var driftNames = []string{"host_tokens_check", "host_turn_fk", "idx_host_child", "idx_host_model"}

// hostObjects reads the host's own objects off the catalog, each with its
// definition as the database stores it, so a rebuild that re-creates them
// differently is seen.
func hostObjects(t *testing.T, db *dbtest.DB) []string {
	t.Helper()
	var q string
	if db.Dialect == dialect.SQLite {
		q = `SELECT name || ': ' || sql FROM sqlite_master WHERE type = 'index' AND name LIKE 'idx_host_%'
UNION ALL SELECT 'fk: ' || "from" || ' -> ' || "table" || '.' || "to" FROM pragma_foreign_key_list('task_session_subagents') WHERE "table" = 'task_session_turns'
UNION ALL SELECT 'check: host_tokens_check' FROM sqlite_master WHERE name = 'task_session_subagents' AND instr(sql, 'host_tokens_check') > 0`
	} else {
		q = `SELECT c.relname || ': ' || pg_get_indexdef(c.oid) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = current_schema() AND c.relname LIKE 'idx_host_%'
UNION ALL SELECT con.conname || ': ' || pg_get_constraintdef(con.oid) FROM pg_constraint con JOIN pg_namespace n ON n.oid = con.connamespace WHERE n.nspname = current_schema() AND con.conname LIKE 'host_%'`
	}
	out := db.Strings(t, q)
	sort.Strings(out)
	return out
}

func names(drift []reconcile.Drift) []string {
	var out []string
	for _, d := range drift {
		out = append(out, d.Name)
	}
	sort.Strings(out)
	return out
}

// driftWarnings counts the WARN lines about undeclared objects and checks
// that each names every one of them.
func driftWarnings(t *testing.T, logs string) int {
	t.Helper()
	n := 0
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, "level=WARN") && strings.Contains(line, "does not declare") {
			n++
			for _, name := range driftNames {
				require.Contains(t, line, name)
			}
		}
	}
	return n
}

// Issue 11 item 5: an owned table's indexes, foreign keys and checks that
// schema.hcl does not declare are never dropped at boot. They are listed by
// Plan and Observe, named in one WARN at every boot (certified or not), the
// store still reaches the certified steady state, and only WithPrune drops
// them.
func TestReconcile_DriftIsKeptReportedAndCertified(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		db.Host(t)
		db.Exec(t, strings.Replace(hostAmendedDDLNotNullID(t, "task_session_id, agent_execution_id, tool_call_id"), "    FOREIGN KEY (task_session_id)", hostConstraints, 1))
		db.Exec(t, hostIndexes)
		before := hostObjects(t, db)
		require.Len(t, before, 4)

		plan, err := reconcile.Plan(ctx, db.DB)
		require.NoError(t, err)
		for _, stmt := range plan.Statements() {
			for _, name := range driftNames {
				require.NotContains(t, stmt, name)
			}
		}
		require.Equal(t, driftNames, names(plan.Drift()))
		obs := observe(t, db)
		require.Equal(t, driftNames, names(obs.Drift))

		var logs bytes.Buffer
		logged := reconcile.WithLogger(slog.New(slog.NewTextHandler(&logs, nil)))
		rep := mustReconcile(t, db, logged)
		require.Equal(t, 1, driftWarnings(t, logs.String()), "one WARN per boot")
		require.Equal(t, driftNames, names(rep.Drift))
		require.Equal(t, before, hostObjects(t, db))
		plan, err = reconcile.Plan(ctx, db.DB)
		require.NoError(t, err)
		require.Empty(t, plan.Statements())
		require.True(t, observe(t, db).EndState.IndexesMatchDeclaration, "clause 4 reads the declared indexes")

		settle(t, db)
		logs.Reset()
		rep = mustReconcile(t, db, logged)
		require.Contains(t, rep.Step(reconcile.StepShape).Detail, certifiedDetail, describe(rep))
		require.Equal(t, 1, driftWarnings(t, logs.String()), "the certified boot names them too")
		require.Equal(t, driftNames, names(rep.Drift))
		require.Equal(t, before, hostObjects(t, db))

		// Only on request.
		plan, err = reconcile.Plan(ctx, db.DB, reconcile.WithPrune())
		require.NoError(t, err)
		require.NotEmpty(t, plan.Statements())
		rep = mustReconcile(t, db, reconcile.WithPrune())
		require.NotContains(t, rep.Step(reconcile.StepShape).Detail, certifiedDetail, "a certificate listing drift does not vouch for a prune")
		require.Empty(t, hostObjects(t, db))
		settle(t, db)
		require.Empty(t, observe(t, db).Drift)
		requireAC33(t, db, freshIndexSet(t, db.Dialect))
	})
}

// A pre-amendment table carrying the host's own index, foreign key and check
// is migrated (a rebuild on SQLite, an ALTER on PostgreSQL) and keeps all of
// them exactly as they were, enforced: the copy path used to recreate only
// the declared indexes.
func TestReconcile_MigrationKeepsDrift(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		db.Host(t)
		legacyWith(t, db, hostIndexes, "    FOREIGN KEY (task_session_id)", hostConstraints)
		db.Exec(t, `INSERT INTO task_sessions (id, task_id) VALUES ('s0', 'k0');
INSERT INTO task_session_turns (id, task_session_id, task_id, started_at, created_at, updated_at) VALUES ('t1', 's0', 'k0', '2026-07-30 00:00:00', '2026-07-30 00:00:00', '2026-07-30 00:00:00')`)
		seedLegacy(t, db)
		before, rows := hostObjects(t, db), snapshot(t, db)
		require.Len(t, before, 4)

		rep := mustReconcile(t, db)
		require.Equal(t, driftNames, names(rep.Drift), describe(rep))
		require.Equal(t, before, hostObjects(t, db))
		require.Equal(t, rows, snapshot(t, db))
		obs := observeKeyBearing(t, db)
		require.True(t, obs.EndState.IndexesMatchDeclaration)
		require.NotContains(t, strings.Join(obs.Indexes["task_session_subagents"], "\n"), "unique(task_session_id, tool_call_id)", "the retired key is still replaced")

		_, err := db.DB.Exec(`UPDATE task_session_subagents SET total_tokens = -1 WHERE id = 'r1'`)
		require.Error(t, err, "the check is enforced")
		_, err = db.DB.Exec(`UPDATE task_session_subagents SET child_session_id = 'ses_child' WHERE id = 'r1'`)
		require.Error(t, err, "the unique index is enforced")
		settle(t, db)
	})
}

// The same with the host's constraints unnamed, as a CREATE TABLE usually
// spells them: SQLite numbers the foreign key, leaves the check nameless and
// backs the inline UNIQUE with an autoindex whose name nobody may take. The
// rebuild still carries all three, enforced.
func TestReconcile_MigrationKeepsUnnamedDrift(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		db.Host(t)
		legacyWith(t, db, "", "    FOREIGN KEY (task_session_id)", `    FOREIGN KEY (turn_id) REFERENCES task_session_turns(id),
    CHECK (is_async IN (0, 1)),
    UNIQUE (child_session_id),
    FOREIGN KEY (task_session_id)`)
		db.Exec(t, `INSERT INTO task_sessions (id, task_id) VALUES ('s0', 'k0');
INSERT INTO task_session_turns (id, task_session_id, task_id, started_at, created_at, updated_at) VALUES ('t1', 's0', 'k0', '2026-07-30 00:00:00', '2026-07-30 00:00:00', '2026-07-30 00:00:00')`)
		seedLegacy(t, db)
		rows := snapshot(t, db)

		rep := mustReconcile(t, db)
		require.Len(t, rep.Drift, 3, describe(rep))
		require.Equal(t, rows, snapshot(t, db))
		require.True(t, observe(t, db).EndState.KeyBearing())
		for stmt, what := range map[string]string{
			`UPDATE task_session_subagents SET is_async = 5 WHERE id = 'r1'`:                   "the check",
			`UPDATE task_session_subagents SET child_session_id = 'ses_child' WHERE id = 'r1'`: "the unique",
			`UPDATE task_session_subagents SET turn_id = 'no such turn' WHERE id = 'r1'`:       "the foreign key",
		} {
			_, err := db.DB.Exec(stmt)
			require.Error(t, err, what+" is enforced")
		}
		settle(t, db)
		require.Len(t, observe(t, db).Drift, 3)
	})
}

// An operator's expression index reads the same in status's index set as in
// the drift report: the expression's text, as the database spells it (the
// index set used to print Atlas's Go value, "&{lower(model)}").
func TestObserve_ExpressionIndexSpelledAsText(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		db.Host(t)
		settle(t, db, quiet)
		db.Exec(t, `CREATE INDEX idx_host_lower_model ON task_session_subagents (lower(model))`)
		obs := observe(t, db)
		require.Contains(t, obs.Indexes["task_session_subagents"], "idx_host_lower_model index(lower(model))")
		require.Len(t, obs.Drift, 1)
		require.Equal(t, "index (lower(model))", obs.Drift[0].Definition)
	})
}
