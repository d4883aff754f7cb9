package reconcile_test

import (
	"database/sql"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/hooks"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/internal/tool/fixtures"
	"github.com/schemastate/schemastate/keys"
	"github.com/schemastate/schemastate/reconcile"
)

// Installed-base variants the field can hold beyond the six canonical states,
// each of which once made the reconcile lose something, publish a key it must
// not, or fail forever.

// legacyWith creates the pre-amendment table with fragments of its DDL
// replaced (pairs of from, to), then runs extra (a script) after it.
func legacyWith(t *testing.T, db *dbtest.DB, extra string, fromTo ...string) {
	t.Helper()
	ddl, err := fixtures.LegacyFixture(string(db.Dialect))
	require.NoError(t, err)
	for i := 0; i+1 < len(fromTo); i += 2 {
		require.Contains(t, ddl, fromTo[i])
		ddl = strings.Replace(ddl, fromTo[i], fromTo[i+1], 1)
	}
	db.Exec(t, ddl)
	if extra != "" {
		db.Exec(t, extra)
	}
}

// auditTrigger is a host trigger on task_session_subagents that records every
// inserted id in subagent_audit.
func auditTrigger(d dialect.Dialect) string {
	if d == dialect.SQLite {
		return `CREATE TABLE subagent_audit (subagent_id TEXT);
CREATE TRIGGER trg_subagent_audit AFTER INSERT ON task_session_subagents BEGIN INSERT INTO subagent_audit VALUES (NEW.id); END`
	}
	return `CREATE TABLE subagent_audit (subagent_id TEXT);
CREATE FUNCTION subagent_audit_fn() RETURNS trigger AS $$ BEGIN INSERT INTO subagent_audit VALUES (NEW.id); RETURN NEW; END $$ LANGUAGE plpgsql;
CREATE TRIGGER trg_subagent_audit AFTER INSERT ON task_session_subagents FOR EACH ROW EXECUTE FUNCTION subagent_audit_fn()`
}

// insertAmendedRow writes one row into the amended table.
func insertAmendedRow(t *testing.T, db *dbtest.DB, id string) {
	t.Helper()
	db.Exec(t, `INSERT INTO task_session_subagents (id, task_session_id, task_id, agent_execution_id, tool_call_id, observed_at, updated_at)
 VALUES ('`+id+`', 's1', 'k1', 'exec-1', 'toolu_`+id+`', '2026-08-01 00:00:00+00:00', '2026-08-01 00:00:00+00:00')`)
}

// AC-33 clause 5 and the rebuild's own guarantees on a pre-amendment table
// whose two-column key is a named unique INDEX (not the inline constraint):
// on SQLite no change in that plan needs an autoindex dropped, so Atlas was
// left to render the copy path itself — its own DROP/RENAME sequence, which
// drops every trigger on the table and skips the row-count and foreign-key
// checks. The reconciler's rebuild must run instead.
func TestAdversarial_AC33_NamedTwoColumnIndexKeepsHostTrigger(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		db.Host(t)
		legacyWith(t, db, "CREATE UNIQUE INDEX subagents_session_tool_call ON task_session_subagents (task_session_id, tool_call_id);\n"+auditTrigger(db.Dialect),
			",\n    UNIQUE (task_session_id, tool_call_id)", "")
		seedLegacy(t, db)
		before := snapshot(t, db)
		require.Equal(t, 3, count(t, db, `SELECT COUNT(*) FROM subagent_audit`))

		plan, err := reconcile.Plan(ctx, db.DB)
		require.NoError(t, err)
		for _, s := range plan.Statements() {
			require.NotContains(t, strings.ToUpper(s), "PRAGMA FOREIGN_KEYS", "Atlas's own copy path planned: %s", s)
		}

		reconcileToAC33(t, db)
		require.Equal(t, before, snapshot(t, db))
		insertAmendedRow(t, db, "r9")
		require.Equal(t, 1, count(t, db, `SELECT COUNT(*) FROM subagent_audit WHERE subagent_id = 'r9'`), "the host's trigger survived the change")
	})
}

// dependents are host objects that name task_session_subagents without being
// attached to it: a view, and a trigger on the parent table.
func dependents(d dialect.Dialect) string {
	view := "CREATE VIEW subagent_calls AS SELECT id, task_session_id, tool_call_id FROM task_session_subagents;\n"
	if d == dialect.SQLite {
		return view + `CREATE TRIGGER trg_session_cancelled AFTER UPDATE OF state ON task_sessions BEGIN UPDATE task_session_subagents SET tool_status = 'cancelled' WHERE task_session_id = NEW.id AND settled_at IS NULL; END`
	}
	return view + `CREATE FUNCTION session_cancelled_fn() RETURNS trigger AS $$ BEGIN UPDATE task_session_subagents SET tool_status = 'cancelled' WHERE task_session_id = NEW.id AND settled_at IS NULL; RETURN NEW; END $$ LANGUAGE plpgsql;
CREATE TRIGGER trg_session_cancelled AFTER UPDATE OF state ON task_sessions FOR EACH ROW EXECUTE FUNCTION session_cancelled_fn()`
}

// atlas-and-dialect-facts.md: the copy path "fails on views that reference
// the table". SQLite's RENAME re-parses every view and trigger in the schema,
// and between DROP TABLE and RENAME those name a table that does not exist:
// the rebuild failed (rolled back) on every boot, so such an installation
// never reached AC-33 and never got execution_since or its backfill.
func TestAdversarial_AC33_RebuildWithViewAndForeignTrigger(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		seedLegacyStore(t, db)
		db.Exec(t, dependents(db.Dialect))
		before := snapshot(t, db)

		rep := mustReconcile(t, db)
		require.Equal(t, reconcile.Applied, rep.Step(reconcile.StepShape).Status, describe(rep))
		requireAC33(t, db, freshIndexSet(t, db.Dialect))
		require.Equal(t, before, snapshot(t, db))
		require.Equal(t, 3, count(t, db, `SELECT COUNT(*) FROM subagent_calls`), "the view reads the rebuilt table")
		db.Exec(t, `UPDATE task_sessions SET state = 'CANCELLED' WHERE id = 's2'`)
		require.Equal(t, 1, count(t, db, `SELECT COUNT(*) FROM task_session_subagents WHERE id = 'r3' AND tool_status = 'cancelled'`), "the parent table's trigger still reaches the rebuilt table")
	})
}

// AC-33b clause 2 is the three-column UNIQUE over every row. A PARTIAL unique
// index on those columns enforces nothing outside its predicate and cannot be
// an ON CONFLICT target, so a table carrying only that is not amended: when
// the shape step fails, execution_since must not be published off it.
func TestAdversarial_AC33b_PartialThreeColumnUniqueIsNotClause2(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		db.Host(t)
		legacyWith(t, db, `CREATE UNIQUE INDEX task_session_subagents_session_execution_tool_call_key ON task_session_subagents (task_session_id, agent_execution_id, tool_call_id) WHERE source = 'live'`,
			",\n    UNIQUE (task_session_id, tool_call_id)", "",
			"    tool_call_id TEXT NOT NULL,", "    agent_execution_id TEXT NOT NULL DEFAULT 'unknown',\n    tool_call_id TEXT NOT NULL,")
		require.False(t, observe(t, db).EndState.ThreeColumnUnique, "a partial index is not clause 2")

		rep, err := reconcile.Reconcile(ctx, db.DB, failAt(hooks.FailpointShapeApplied))
		require.ErrorIs(t, err, reconcile.ErrStepFailed)
		require.Equal(t, reconcile.Skipped, rep.Step(reconcile.StepExecutionSince).Status, describe(rep))
		require.Equal(t, reconcile.Skipped, rep.Step(reconcile.StepBackfill).Status, "AC-33c")
		require.Equal(t, keys.Inactive, readKeys(t, db).State())

		reconcileToAC33(t, db)
	})
}

// AC-33b clause 2 names the columns in order: a unique over
// (tool_call_id, agent_execution_id, task_session_id) is not it. With the
// shape step failing, the key stays unwritten; once the step runs, the
// declared key replaces it.
func TestAdversarial_AC33b_ReorderedThreeColumnUniqueIsNotClause2(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		db.Host(t)
		db.Exec(t, hostAmendedDDL(t, "tool_call_id, agent_execution_id, task_session_id"))
		require.False(t, observe(t, db).EndState.ThreeColumnUnique)

		rep, err := reconcile.Reconcile(ctx, db.DB, failAt(hooks.FailpointShapeApplied))
		require.ErrorIs(t, err, reconcile.ErrStepFailed)
		require.Equal(t, reconcile.Skipped, rep.Step(reconcile.StepExecutionSince).Status, describe(rep))
		require.Nil(t, readKeys(t, db).ExecutionSince)

		reconcileToAC33(t, db)
	})
}

// A legacy table whose timestamps were declared at millisecond precision
// (timestamp(3)) reaches the declared timestamp by a widening every stored
// value survives. It was refused as destructive on PostgreSQL, so AC-33 never
// held there: no execution_since, no backfill, on every boot.
func TestAdversarial_AC33_TimestampPrecisionWideningApplied(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		db.Host(t)
		legacyWith(t, db, "",
			"observed_at TIMESTAMP NOT NULL", "observed_at TIMESTAMP(3) NOT NULL",
			"settled_at TIMESTAMP,", "settled_at TIMESTAMP(3),")
		seedLegacy(t, db)
		before := snapshot(t, db)

		plan, err := reconcile.Plan(ctx, db.DB)
		require.NoError(t, err)
		require.Empty(t, plan.Refused())
		reconcileToAC33(t, db)
		require.Equal(t, before, snapshot(t, db), "every timestamp survives byte for byte")
	})
}

// A refusal names the change in SQL type names an operator can act on. A
// legacy timestamptz column (which a USING-less ALTER would shift by the
// session TimeZone on PostgreSQL) is refused, nothing is touched, and the
// message said "*sqlite.UserDefinedType" on SQLite.
func TestAdversarial_RefusalNamesTypesInSQL(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		db.Host(t)
		legacyWith(t, db, "", "observed_at TIMESTAMP NOT NULL", "observed_at TIMESTAMPTZ NOT NULL")
		seedLegacy(t, db)
		before := snapshot(t, db)

		rep, err := reconcile.Reconcile(ctx, db.DB)
		require.ErrorIs(t, err, reconcile.ErrStepFailed)
		detail := rep.Step(reconcile.StepRefused).Detail
		require.Regexp(t, `(?i)would change column observed_at from (timestamptz|timestamp with time zone) to timestamp\b`, detail)
		require.NotContains(t, detail, "*")
		require.Equal(t, before, snapshot(t, db), "nothing shifted, nothing rebuilt")
		require.Nil(t, readKeys(t, db).ExecutionSince, "AC-33a: refused, so no key")
	})
}

// A host view over the metric columns. SQLite rebuilds under it. PostgreSQL
// cannot widen a column a view reads (integer → bigint); the widening fails
// and rolls back on every boot until an operator acts, and its error must
// name the view (PostgreSQL's DETAIL is the only place it appears). It must
// not take the constraint swap down with it.
func TestAdversarial_AC33a_ViewOverMetricsIsNamed(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		seedLegacyStore(t, db)
		db.Exec(t, `CREATE VIEW subagent_tokens AS SELECT task_session_id, SUM(total_tokens) AS tokens FROM task_session_subagents GROUP BY task_session_id`)
		before := snapshot(t, db)

		rep, err := reconcile.Reconcile(ctx, db.DB)
		if db.Dialect == dialect.SQLite {
			require.NoError(t, err, describe(rep))
			requireAC33(t, db, freshIndexSet(t, db.Dialect))
			require.Equal(t, before, snapshot(t, db))
			require.Equal(t, 275717, count(t, db, `SELECT tokens FROM subagent_tokens WHERE task_session_id = 's1'`))
			return
		}
		// The widening is its own step: it fails, names the view and rolls
		// back, while the key change it no longer holds hostage commits — the
		// installation reaches AC-33, gets execution_since and its backfill.
		require.ErrorIs(t, err, reconcile.ErrStepFailed)
		require.Equal(t, reconcile.Applied, rep.Step(reconcile.StepShape).Status, describe(rep))
		require.Equal(t, reconcile.Failed, rep.Step(reconcile.StepWiden).Status)
		require.Contains(t, rep.Step(reconcile.StepWiden).Detail, "subagent_tokens", "the blocking view is named")
		require.Equal(t, reconcile.Applied, rep.Step(reconcile.StepExecutionSince).Status)
		require.Equal(t, reconcile.Applied, rep.Step(reconcile.StepBackfill).Status)
		observeKeyBearing(t, db)
		require.Equal(t, before, snapshot(t, db))
		var typ string
		require.NoError(t, db.QueryRow(`SELECT data_type FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = 'task_session_subagents' AND column_name = 'total_tokens'`).Scan(&typ))
		require.Equal(t, "integer", typ, "the widening rolled back")

		// Every boot retries the widening, and never certifies the shape
		// while it is pending; once the view is gone it applies.
		rep, err = reconcile.Reconcile(ctx, db.DB)
		require.ErrorIs(t, err, reconcile.ErrStepFailed)
		require.Equal(t, reconcile.Failed, rep.Step(reconcile.StepWiden).Status)
		require.NotContains(t, rep.Step(reconcile.StepShape).Detail, "certified")
		db.Exec(t, `DROP VIEW subagent_tokens`)
		rep = mustReconcile(t, db)
		require.Equal(t, reconcile.Applied, rep.Step(reconcile.StepWiden).Status)
		requireAC33(t, db, freshIndexSet(t, db.Dialect))
		require.Equal(t, before, snapshot(t, db))
	})
}

// The reconcile works in one schema: PostgreSQL's current_schema(), the first
// schema on search_path that exists. When the host tables live further down
// the path, the failure said "host tables missing" about tables the host
// reads every second — it must name the schema it looked in. Nothing is
// created in either schema.
func TestAdversarial_HostTablesMissingNamesTheSchema(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		target, want := db.DB, `"main"`
		if db.Dialect == dialect.Postgres {
			db.Host(t)
			first := db.Schema + "_first"
			db.Exec(t, "CREATE SCHEMA "+first)
			t.Cleanup(func() { _, _ = db.DB.Exec("DROP SCHEMA " + first + " CASCADE") })
			pool, err := sql.Open("pgx", dbtest.WithParam(t, db.DSN, "search_path", first+","+db.Schema))
			require.NoError(t, err)
			defer pool.Close()
			target, want = pool, `"`+first+`"`
		}
		rep, err := reconcile.Reconcile(ctx, target)
		require.ErrorIs(t, err, reconcile.ErrStepFailed)
		detail := rep.Step(reconcile.StepHostTables).Detail
		require.Contains(t, detail, "task_sessions")
		require.Contains(t, detail, want, "names the schema it looked in")
		require.Equal(t, reconcile.Skipped, rep.Step(reconcile.StepShape).Status)
		require.Empty(t, observe(t, db).Indexes, "nothing created")
		if db.Dialect == dialect.Postgres {
			require.Zero(t, count(t, db, `SELECT COUNT(*) FROM information_schema.tables WHERE table_name = 'task_session_subagents' AND table_schema IN ($1, $2)`, db.Schema, db.Schema+"_first"))
		}
	})
}

// The reconcile borrows connections from the host's pool and must hand them
// back as it found them. SQLite's busy timeout was raised to the lock wait
// (60s by default) and never restored, so the host's own statements on that
// connection then waited a minute on any lock instead of their configured
// 250ms. On PostgreSQL (two connections: the steps' and the lock's
// transaction's) every session keeps its settings and holds no lock.
func TestAdversarial_PooledConnectionReturnedAsLent(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		seedLegacyStore(t, db)
		dsn := db.DSN + "&_pragma=busy_timeout(250)"
		n := 1
		if db.Dialect == dialect.Postgres {
			dsn = db.DSN + "&lock_timeout=250"
			n = 2
		}
		pool, err := sql.Open(driverName(db.Dialect), dsn)
		require.NoError(t, err)
		defer pool.Close()
		pool.SetMaxOpenConns(n)
		// settings reads every connection of the pool, all held at once.
		settings := func() []string {
			q := `SELECT (SELECT * FROM pragma_busy_timeout) || ' ' || (SELECT * FROM pragma_foreign_keys) || ' ' || (SELECT * FROM pragma_legacy_alter_table)`
			if db.Dialect == dialect.Postgres {
				q = `SELECT current_setting('lock_timeout') || ' ' || current_setting('statement_timeout') || ' ' || current_setting('idle_in_transaction_session_timeout') || ' ' || (SELECT COUNT(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid())`
			}
			var out []string
			for range n {
				c, err := pool.Conn(ctx)
				require.NoError(t, err)
				defer c.Close()
				var s string
				require.NoError(t, c.QueryRowContext(ctx, q).Scan(&s))
				out = append(out, s)
			}
			return out
		}
		before := settings()
		_, err = reconcile.Reconcile(ctx, pool)
		require.NoError(t, err)
		requireAC33(t, db, freshIndexSet(t, db.Dialect))
		require.Equal(t, before, settings())
	})
}
