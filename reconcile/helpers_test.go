package reconcile_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate"
	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/internal/testkit/pgbouncer"
	"github.com/schemastate/schemastate/keys"
	"github.com/schemastate/schemastate/reconcile"
)

var ctx = context.Background()

// legacyColumns are the pre-amendment table's columns.
var legacyColumns = []string{"id", "task_session_id", "task_id", "turn_id", "tool_call_id", "parent_tool_call_id",
	"subagent_type", "description", "agent_id", "child_session_id", "model", "agent_status", "tool_status",
	"is_async", "total_tokens", "tool_use_count", "duration_ms", "source", "observed_at", "settled_at", "updated_at"}

// seedLegacy fills a pre-amendment table with rows that exercise every kind
// of value a rebuild could disturb: timestamps at several precisions and
// offsets, NULL metrics, a reported zero, both sources, a nested invocation.
func seedLegacy(t *testing.T, db *dbtest.DB) {
	t.Helper()
	db.Exec(t, `INSERT INTO task_sessions (id, task_id) VALUES ('s1', 'k1');
INSERT INTO task_sessions (id, task_id) VALUES ('s2', 'k2');
INSERT INTO task_session_subagents (id, task_session_id, task_id, turn_id, tool_call_id, parent_tool_call_id, subagent_type, description, agent_id, child_session_id, model, agent_status, tool_status, is_async, total_tokens, tool_use_count, duration_ms, source, observed_at, settled_at, updated_at)
 VALUES ('r1', 's1', 'k1', 't1', 'toolu_1', NULL, 'security-reviewer', 'Review', 'a1', NULL, 'claude-opus-5[1m]', 'completed', 'completed', 0, 275717, 0, 81234, 'live', '2026-07-30 01:39:37.271235+00:00', '2026-07-30 01:41:02.5+00:00', '2026-07-30 01:41:02.5+00:00');
INSERT INTO task_session_subagents (id, task_session_id, task_id, turn_id, tool_call_id, subagent_type, agent_id, model, agent_status, tool_status, is_async, source, observed_at, updated_at)
 VALUES ('r2', 's1', 'k1', 't1', 'toolu_2', 'perf', 'a2', 'claude-opus-5[1m]', 'async_launched', 'completed', 1, 'backfill', '2026-07-30 01:39:37+00:00', '2026-07-30 01:39:38.000001+00:00');
INSERT INTO task_session_subagents (id, task_session_id, task_id, turn_id, tool_call_id, parent_tool_call_id, child_session_id, agent_status, tool_status, source, observed_at, updated_at)
 VALUES ('r3', 's2', 'k2', NULL, 'toolu_3', 'toolu_1', 'ses_child', 'started', 'in_progress', 'live', '2026-07-30 23:59:59.999999+00:00', '2026-07-30 23:59:59.999999+00:00')`)
}

// seedLegacyStore lays down the host tables and the pre-amendment table on
// db and fills it (seedLegacy): the installed base most tests upgrade.
func seedLegacyStore(t *testing.T, db *dbtest.DB) {
	t.Helper()
	db.Host(t).Legacy(t)
	seedLegacy(t, db)
}

// snapshot renders every legacy column of every row exactly: on SQLite with
// quote(), which shows the storage class and the bytes; on PostgreSQL as text.
func snapshot(t *testing.T, db *dbtest.DB) []string {
	t.Helper()
	exprs := make([]string, len(legacyColumns))
	for i, c := range legacyColumns {
		if db.Dialect == dialect.SQLite {
			exprs[i] = "quote(" + c + ")"
		} else {
			exprs[i] = "COALESCE(" + c + "::text, 'NULL')"
		}
	}
	return db.Strings(t, "SELECT "+strings.Join(exprs, " || '|' || ")+" FROM task_session_subagents ORDER BY id")
}

// online forces the online phases on the tiny test tables and copies one
// page per batch, so the copy takes several batches.
var online = []reconcile.Option{reconcile.WithOnlineAbove(0), reconcile.WithCopyBatchPages(1)}

func openPostgres(t testing.TB) *dbtest.DB {
	t.Helper()
	return dbtest.Open(t, dialect.Postgres)
}

// seedMany adds n legacy rows over several heap pages, with metrics that
// exercise NULL, zero and the integer maximum.
func seedMany(t *testing.T, db *dbtest.DB, n int) {
	t.Helper()
	db.Exec(t, fmt.Sprintf(`INSERT INTO task_session_subagents (id, task_session_id, task_id, tool_call_id, description, is_async, total_tokens, tool_use_count, duration_ms, source, observed_at, updated_at)
 SELECT 'g' || i, CASE WHEN i %% 2 = 0 THEN 's1' ELSE 's2' END, 'k1', 'toolu_g' || i, repeat('x', 200),
   i %% 2, CASE WHEN i %% 7 = 0 THEN NULL ELSE i * 1000 END, CASE WHEN i %% 5 = 0 THEN 0 ELSE i END, CASE WHEN i = 1 THEN 2147483647 ELSE i END,
   'live', timestamp '2026-07-30 00:00:00' + i * interval '1 ms', timestamp '2026-07-30 00:00:00' + i * interval '1 ms'
 FROM generate_series(1, %d) i`, n))
}

// seededOnlineStore is the PostgreSQL pre-amendment store the online upgrade
// tests start from: seedLegacy's rows, 300 more over several heap pages
// (seedMany) and message history to backfill (seedHistory). before is its
// snapshot.
func seededOnlineStore(t *testing.T) (db *dbtest.DB, before []string) {
	t.Helper()
	db = openPostgres(t)
	seedLegacyStore(t, db)
	seedMany(t, db, 300)
	seedHistory(t, db)
	return db, snapshot(t, db)
}

func count(t *testing.T, db *dbtest.DB, q string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, db.QueryRow(db.Q(q), args...).Scan(&n))
	return n
}

func mustReconcile(t *testing.T, db *dbtest.DB, opts ...reconcile.Option) *reconcile.Report {
	t.Helper()
	rep, err := reconcile.Reconcile(ctx, db.DB, opts...)
	require.NoError(t, err, "report: %s", describe(rep))
	return rep
}

func describe(rep *reconcile.Report) string {
	var b strings.Builder
	for _, s := range rep.Steps {
		fmt.Fprintf(&b, "[%s %s %d %s] ", s.Name, s.Status, s.Statements, s.Detail)
	}
	return b.String()
}

func readKeys(t *testing.T, db *dbtest.DB) keys.Set {
	t.Helper()
	ks, err := keys.Read(ctx, db.DB, db.Dialect)
	require.NoError(t, err)
	return ks
}

func observe(t *testing.T, db *dbtest.DB) *reconcile.Observation {
	t.Helper()
	obs, err := reconcile.Observe(ctx, db.DB)
	require.NoError(t, err)
	return obs
}

// requireAC33 asserts AC-33's end state: clauses 1–4 observed on the live
// schema, clause 4 against a fresh database's index set, and clause 6.
func requireAC33(t *testing.T, db *dbtest.DB, freshIndexes []string) {
	t.Helper()
	obs := observe(t, db)
	require.True(t, obs.EndState.ExecutionColumnNotNull, "clause 1")
	require.True(t, obs.EndState.ThreeColumnUnique, "clause 2")
	require.True(t, obs.EndState.TwoColumnUniqueAbsent, "clause 3")
	require.Equal(t, freshIndexes, obs.Indexes["task_session_subagents"], "clause 4: index set equals a fresh database's")
	require.NotNil(t, obs.Keys.ExecutionSince, "clause 6")
}

// reconcileToAC33 runs a reconcile that must succeed, then asserts AC-33's end
// state (requireAC33) against a fresh database of db's dialect.
func reconcileToAC33(t *testing.T, db *dbtest.DB) {
	t.Helper()
	mustReconcile(t, db)
	requireAC33(t, db, freshIndexSet(t, db.Dialect))
}

// observeKeyBearing observes db and requires AC-33 clauses 1–3 (KeyBearing).
func observeKeyBearing(t *testing.T, db *dbtest.DB) *reconcile.Observation {
	t.Helper()
	obs := observe(t, db)
	require.True(t, obs.EndState.KeyBearing())
	return obs
}

// freshIndexSet reconciles a brand-new database of the same dialect and
// returns its index set.
func freshIndexSet(t *testing.T, d dialect.Dialect) []string {
	t.Helper()
	fresh := dbtest.Open(t, d).Host(t)
	mustReconcile(t, fresh)
	set := observe(t, fresh).Indexes["task_session_subagents"]
	require.Len(t, set, 4)
	return set
}

// failAt fails the reconcile at one named failpoint, as a database error would.
func failAt(point string) reconcile.Option {
	return reconcile.WithFailpoint(func(p string) error {
		if p == point {
			return errors.New("forced failure at " + p)
		}
		return nil
	})
}

// cancelAt is the option that calls cancel when the reconcile reaches point.
func cancelAt(point string, cancel context.CancelFunc) reconcile.Option {
	return reconcile.WithFailpoint(func(p string) error {
		if p == point {
			cancel()
		}
		return nil
	})
}

// catalogVersion changes whenever DDL touches the schema: SQLite's
// schema_version; on PostgreSQL, the xmin of every catalog row of the
// schema's relations, constraints and columns.
func catalogVersion(t *testing.T, db *dbtest.DB) string {
	if db.Dialect == dialect.SQLite {
		var v int
		require.NoError(t, db.QueryRow(`PRAGMA schema_version`).Scan(&v))
		return fmt.Sprint(v)
	}
	var s string
	require.NoError(t, db.QueryRow(`
SELECT string_agg(x, ',' ORDER BY x) FROM (
  SELECT c.relname || ':' || c.xmin::text AS x FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = current_schema()
  UNION ALL SELECT con.conname || ':' || con.xmin::text FROM pg_constraint con JOIN pg_namespace n ON n.oid = con.connamespace WHERE n.nspname = current_schema()
  UNION ALL SELECT c.relname || '.' || a.attname || ':' || a.xmin::text FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = current_schema() AND a.attnum > 0
) s`).Scan(&s))
	return s
}

// requireNoDDL requires a further reconcile to run no statement in any step
// and to leave the catalog as it was (catalogVersion).
func requireNoDDL(t *testing.T, db *dbtest.DB) {
	t.Helper()
	before := catalogVersion(t, db)
	rep := mustReconcile(t, db)
	for _, s := range rep.Steps {
		require.Zero(t, s.Statements, "step %s ran statements", s.Name)
	}
	require.Equal(t, before, catalogVersion(t, db))
}

// failShape makes a reconcile of the seeded legacy store fail its shape step
// for a real reason until undo is called: on SQLite a legacy row whose
// (nullable) primary key is NULL, which the rebuild into the declared NOT NULL
// key refuses (ErrNullRow); on PostgreSQL another session holding a lock on the table,
// which a DDL lock_timeout (WithDDLLockTimeout) then outlasts.
func failShape(t *testing.T, db *dbtest.DB) (undo func()) {
	t.Helper()
	if db.Dialect == dialect.SQLite {
		db.Exec(t, `INSERT INTO task_session_subagents (id, task_session_id, task_id, tool_call_id, observed_at, updated_at) VALUES (NULL, 's1', 'k1', 'toolu_null', '2026-07-30 01:00:00+00:00', '2026-07-30 01:00:00+00:00')`)
		return func() { db.Exec(t, `DELETE FROM task_session_subagents WHERE id IS NULL`) }
	}
	tx, err := hostPool(t, db, 0).Begin()
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback() })
	_, err = tx.Exec(`LOCK TABLE task_session_subagents IN ACCESS SHARE MODE`)
	require.NoError(t, err)
	return func() { require.NoError(t, tx.Rollback()) }
}

// onEveryConnection runs query (one text column) on every open connection
// of pool, all held at once so that each is a different one, and returns
// each answer: what the host's pool carries after a reconcile.
func onEveryConnection(t *testing.T, pool *sql.DB, query string) []string {
	t.Helper()
	var conns []*sql.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	var out []string
	for range pool.Stats().OpenConnections {
		c, err := pool.Conn(ctx)
		require.NoError(t, err)
		conns = append(conns, c)
		var got string
		require.NoError(t, c.QueryRowContext(ctx, query).Scan(&got))
		out = append(out, got)
	}
	return out
}

// uniqueName is prefix and eight random hexadecimal digits: a name of a
// role or database on the shared test server that no other test takes.
func uniqueName(prefix string) string {
	return prefix + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
}

// editDSN is the URL dsn changed by edit (its user, its database).
func editDSN(t *testing.T, dsn string, edit func(u *url.URL)) string {
	t.Helper()
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	edit(u)
	return u.String()
}

// legacyBehindPooler starts a transaction-mode PgBouncer before a database
// of its own holding the seeded pre-amendment store (p.Direct), and opens a
// pool through it that prepares no statement (exec mode), as a transaction
// pooler needs; the pool is closed when the test ends.
func legacyBehindPooler(t *testing.T) (p *pgbouncer.Pooler, pooled *sql.DB) {
	t.Helper()
	p = pgbouncer.Start(t, pgbouncer.Options{Mode: pgbouncer.Transaction})
	p.Direct.Host(t).Legacy(t)
	seedLegacy(t, p.Direct)
	pooled, err := sql.Open("pgx", dbtest.WithParam(t, p.DSN, "default_query_exec_mode", "exec"))
	require.NoError(t, err)
	t.Cleanup(func() { pooled.Close() })
	return p, pooled
}

// declarationWith is the built-in declaration with its first from replaced
// by to, under the name file; the replacement must change it (from "" is
// the built-in declaration as it is).
func declarationWith(t testing.TB, from, to, file string) reconcile.Option {
	t.Helper()
	if from == "" {
		return reconcile.WithDeclaration(schemastate.SchemaHCL, file)
	}
	src := string(schemastate.SchemaHCL)
	out := strings.Replace(src, from, to, 1)
	require.NotEqual(t, src, out, "declaration %s applies", file)
	return reconcile.WithDeclaration([]byte(out), file)
}

// hostPool is a pool of the host's own on db (PostgreSQL), closed when the
// test ends, allowing maxOpen connections (0: no bound).
func hostPool(t *testing.T, db *dbtest.DB, maxOpen int) *sql.DB {
	t.Helper()
	pool, err := sql.Open("pgx", db.DSN)
	require.NoError(t, err)
	t.Cleanup(func() { pool.Close() })
	pool.SetMaxOpenConns(maxOpen)
	return pool
}
