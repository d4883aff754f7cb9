package reconcile_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/declare"
	"github.com/schemastate/schemastate/internal/ops"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/reconcile"
)

// hostileNames are index names an operator can give an index on the owned
// table that read as SQL to a renderer that does not double the quote it
// wraps a name in: each names the host's own index idx_messages_created_at,
// then drops the host table kandev_meta. Atlas quotes with " on PostgreSQL
// and ` on SQLite, and formats names into '…' in its SQLite catalog reads.
var hostileNames = []struct{ quote, name string }{
	{"double quote", `idx_messages_created_at";DROP TABLE kandev_meta;--`},
	{"backtick", "idx_messages_created_at`;DROP TABLE kandev_meta;--"},
	{"single quote", `idx_messages_created_at'); DROP TABLE kandev_meta; --`},
}

// hostMarker is a host row in kandev_meta that must outlive every reconcile.
const hostMarker = `INSERT INTO kandev_meta (key, value) VALUES ('host_marker', 'kept')`

// requireHostIntact asserts kandev_meta still holds the host's row and the
// host's index idx_messages_created_at still exists.
func requireHostIntact(t *testing.T, db *dbtest.DB) {
	t.Helper()
	require.Equal(t, []string{"kept"}, db.Strings(t, `SELECT value FROM kandev_meta WHERE key = 'host_marker'`))
	require.True(t, indexExists(t, db, "idx_messages_created_at"), "the host's index")
}

func indexExists(t *testing.T, db *dbtest.DB, name string) bool {
	t.Helper()
	q := `SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name = ?`
	if db.Dialect == dialect.Postgres {
		q = `SELECT count(*) FROM pg_indexes WHERE schemaname = current_schema() AND indexname = ?`
	}
	return count(t, db, q, name) == 1
}

// createHostileIndex creates the index with the name quoted as SQL quotes
// it (not through db.Exec, which splits a script at every ';').
func createHostileIndex(t *testing.T, db *dbtest.DB, name string) {
	t.Helper()
	_, err := db.DB.Exec("CREATE INDEX " + dialect.QuoteIdent(name) + " ON task_session_subagents (model)")
	require.NoError(t, err)
	require.True(t, indexExists(t, db, name))
}

// quotedDrop is the statement that drops the named index, quoted by the
// module's own quoting.
func quotedDrop(t *testing.T, db *dbtest.DB, name string) string {
	t.Helper()
	if db.Dialect == dialect.SQLite {
		return "DROP INDEX " + dialect.QuoteIdent(name)
	}
	return "DROP INDEX " + dialect.QuoteIdent(db.Strings(t, `SELECT current_schema()`)[0]) + "." + dialect.QuoteIdent(name)
}

// eachHostileIndex runs fn for every hostile name on both dialects, on a
// settled host store holding hostMarker and an operator's index of that name
// on the owned table (createHostileIndex).
func eachHostileIndex(t *testing.T, fn func(t *testing.T, db *dbtest.DB, name string)) {
	for _, h := range hostileNames {
		t.Run(h.quote, func(t *testing.T) {
			dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
				db.Host(t)
				settle(t, db, quiet)
				db.Exec(t, hostMarker)
				createHostileIndex(t, db, h.name)
				fn(t, db, h.name)
			})
		})
	}
}

// An operator's index whose name holds a quote is dropped by reconcile
// --prune under the module's own quoting: the plan is that one DROP INDEX,
// the reconcile runs exactly it, and the host's index and kandev_meta keep
// their rows (Atlas's rendering dropped both).
func TestReconcile_HostileIndexNameIsDroppedQuotedUnderPrune(t *testing.T) {
	eachHostileIndex(t, func(t *testing.T, db *dbtest.DB, name string) {
		drop := quotedDrop(t, db, name)

		plan, err := reconcile.Plan(ctx, db.DB, reconcile.WithPrune())
		require.NoError(t, err)
		require.Equal(t, []string{drop}, plan.Statements())

		var ran []string
		rep := mustReconcile(t, db, quiet, reconcile.WithPrune(), reconcile.WithExecHook(func(s string) { ran = append(ran, s) }))
		require.Equal(t, []string{drop}, ran, describe(rep))
		require.False(t, indexExists(t, db, name), "dropped")
		requireHostIntact(t, db)
		requireAC33(t, db, freshIndexSet(t, db.Dialect))
	})
}

// Without --prune the same index is drift: kept, untouched and reported by
// name, and the boot goes on to its certified steady state.
func TestReconcile_HostileIndexNameIsKeptUntouched(t *testing.T) {
	eachHostileIndex(t, func(t *testing.T, db *dbtest.DB, name string) {
		plan, err := reconcile.Plan(ctx, db.DB)
		require.NoError(t, err)
		require.Empty(t, plan.Statements())
		require.Equal(t, []string{name}, names(plan.Drift()))

		rep := settle(t, db, quiet)
		require.Equal(t, []string{name}, names(rep.Drift))
		require.True(t, indexExists(t, db, name), "kept")
		requireHostIntact(t, db)
	})
}

// A migration that rebuilds the owned table (SQLite's copy path) creates an
// operator's index again from the statement the database stored, never
// through Atlas's rendering of its name; on PostgreSQL the ALTERs leave it
// alone. Either way it exists afterwards, and so do the host's objects.
func TestReconcile_MigrationKeepsHostileIndexName(t *testing.T) {
	for _, h := range hostileNames {
		t.Run(h.quote, func(t *testing.T) {
			dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
				db.Host(t).Legacy(t)
				seedLegacy(t, db)
				db.Exec(t, hostMarker)
				createHostileIndex(t, db, h.name)
				rows := snapshot(t, db)

				rep := mustReconcile(t, db, quiet)
				require.Equal(t, []string{h.name}, names(rep.Drift), describe(rep))
				require.Equal(t, rows, snapshot(t, db))
				require.True(t, indexExists(t, db, h.name), "kept through the migration")
				requireHostIntact(t, db)
				settle(t, db, quiet)
			})
		})
	}
}

// hostileDeclaration is a one-table declaration with the table, one
// column and the index named as given.
func hostileDeclaration(table, column, index string) string {
	return fmt.Sprintf(`variable "dialect" {
  type    = string
  default = "sqlite"
}

schema "main" {}

table %q {
  schema = schema.main
  column %q {
    type = sql("text")
    null = false
  }
  column "k" {
    type = sql("text")
  }
  index %q {
    columns = [column.k]
  }
}
`, table, column, index)
}

// A schema.hcl whose table, column or index name holds a quote or a
// backtick is refused before anything runs: the error names the name and
// cites its file:line,col, Plan fails the same way, and the host's objects
// are untouched (the table was a second statement to Atlas's renderer).
func TestReconcile_HostileDeclaredNameRefusedWithPosition(t *testing.T) {
	cases := []struct {
		name, hcl, refused, at string
	}{
		{"table with a double quote", hostileDeclaration(`t";DROP TABLE kandev_meta;--`, "id", "idx_t_id"), `table "t\";DROP TABLE kandev_meta;--"`, "hostile.hcl:8,7"},
		{"table with a backtick", hostileDeclaration("t`;DROP TABLE kandev_meta;--", "id", "idx_t_id"), "table \"t`;DROP TABLE kandev_meta;--\"", "hostile.hcl:8,7"},
		{"column with a double quote", hostileDeclaration("t", `id";DROP TABLE kandev_meta;--`, "idx_t_id"), `column "id\";DROP TABLE kandev_meta;--"`, "hostile.hcl:10,10"},
		{"index with a backtick", hostileDeclaration("t", "id", "idx`;DROP TABLE kandev_meta;--"), "index \"idx`;DROP TABLE kandev_meta;--\"", "hostile.hcl:17,9"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
				db.Host(t)
				db.Exec(t, hostMarker)
				decl := reconcile.WithDeclaration([]byte(c.hcl), "hostile.hcl")

				_, err := reconcile.Plan(ctx, db.DB, decl)
				require.ErrorIs(t, err, ops.ErrUnsafeName)
				require.Contains(t, err.Error(), c.at+": ")
				require.Contains(t, err.Error(), c.refused)

				var ran []string
				rep, err := reconcile.Reconcile(ctx, db.DB, quiet, decl, reconcile.WithExecHook(func(s string) { ran = append(ran, s) }))
				require.ErrorIs(t, err, ops.ErrUnsafeName)
				require.Equal(t, reconcile.Failed, rep.Step(reconcile.StepHostTables).Status)
				require.Contains(t, rep.Step(reconcile.StepHostTables).Detail, c.at+": ")
				require.Empty(t, ran)
				requireHostIntact(t, db)
				require.Zero(t, count(t, db, `SELECT count(*) FROM `+map[dialect.Dialect]string{
					dialect.SQLite:   `sqlite_master WHERE name = 't'`,
					dialect.Postgres: `pg_tables WHERE schemaname = current_schema() AND tablename = 't'`,
				}[db.Dialect]), "nothing was created")
			})
		})
	}
}

// The schema the reconcile works in is a name Atlas renders too
// (PostgreSQL's current_schema(), which an operator names): one that is not
// plain is refused by name, with the declaration it was to be bound to.
func TestDeclaration_HostileSchemaNameRefused(t *testing.T) {
	_, err := declare.Load("", dialect.Postgres, `s";DROP TABLE kandev_meta;--`)
	require.ErrorIs(t, err, ops.ErrUnsafeName)
	require.Contains(t, err.Error(), `schema.hcl (built in): `)
	require.Contains(t, err.Error(), `schema "s\";DROP TABLE kandev_meta;--"`)
	_, err = declare.Load("", dialect.Postgres, "public")
	require.NoError(t, err)
}

// misreadChecks are two checks SQLite reads as written. Atlas's SQLite
// inspector ends an expression at its first balanced parenthesis, comments
// unseen, and looks for the next CHECK inside a string: it reads the first
// check as ending inside its comment, and the second as closing that
// comment and holding a DROP TABLE. Rendered into the rebuilt table, they
// are two statements.
const misreadChecks = `    CHECK (model <> '' /* ) */),
    CHECK (description <> 'CHECK ( */ OR 1)); DROP TABLE kandev_meta; --'),
    FOREIGN KEY (task_session_id)`

// A SQLite rebuild that would carry a host check as Atlas misread it is
// refused before anything runs (what it renders from the catalog must stay
// one statement); PostgreSQL's migration never renders the check and keeps
// it. The host's table keeps its row on both.
func TestReconcile_RebuildRefusesMisreadHostCheck(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		db.Host(t)
		legacyWith(t, db, "", "    FOREIGN KEY (task_session_id)", misreadChecks)
		seedLegacy(t, db)
		db.Exec(t, hostMarker)
		rows := snapshot(t, db)

		rep, err := reconcile.Reconcile(ctx, db.DB, quiet)
		requireHostIntact(t, db)
		require.Equal(t, rows, snapshot(t, db))
		if db.Dialect == dialect.SQLite {
			require.ErrorIs(t, err, ops.ErrNotOneStatement)
			require.Equal(t, reconcile.Failed, rep.Step(reconcile.StepShape).Status)
			require.Contains(t, rep.Step(reconcile.StepShape).Detail, "DROP TABLE kandev_meta", "the refusal quotes the text")
			require.Zero(t, count(t, db, `SELECT count(*) FROM pragma_table_info('task_session_subagents') WHERE name = 'agent_execution_id'`), "the table was left as it was")
			return
		}
		require.NoError(t, err, describe(rep))
		require.Len(t, rep.Drift, 2)
		_, err = db.DB.Exec(`UPDATE task_session_subagents SET model = '' WHERE id = 'r1'`)
		require.Error(t, err, "the check is kept")
	})
}

// hostileCheck is a host check on the owned table whose name holds a quote.
const hostileCheck = `CONSTRAINT "tokens"";DROP TABLE kandev_meta;--" CHECK (total_tokens IS NULL OR total_tokens >= 0)`

// addHostileCheck adds hostileCheck to the settled (empty) owned table: by
// ALTER TABLE on PostgreSQL; on SQLite, which takes a check only in CREATE
// TABLE, by creating the table again from its stored SQL with the check
// added (not through db.Exec, which splits a script at every ';').
func addHostileCheck(t *testing.T, db *dbtest.DB) {
	t.Helper()
	if db.Dialect == dialect.Postgres {
		_, err := db.DB.Exec(`ALTER TABLE task_session_subagents ADD ` + hostileCheck)
		require.NoError(t, err)
		return
	}
	create := db.Strings(t, `SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'task_session_subagents'`)[0]
	others := db.Strings(t, `SELECT sql FROM sqlite_master WHERE tbl_name = 'task_session_subagents' AND type IN ('index', 'trigger') AND sql IS NOT NULL`)
	_, err := db.DB.Exec(`DROP TABLE task_session_subagents`)
	require.NoError(t, err)
	_, err = db.DB.Exec(strings.TrimSuffix(strings.TrimSpace(create), ")") + ", " + hostileCheck + ")")
	require.NoError(t, err)
	for _, q := range others {
		_, err = db.DB.Exec(q)
		require.NoError(t, err)
	}
}

// A host check whose name holds a quote is kept and enforced without
// --prune, and dropped by it — on PostgreSQL by an ALTER TABLE … DROP
// CONSTRAINT under the module's quoting, on SQLite by the rebuild, which
// does not carry it — leaving the host's index and kandev_meta intact.
func TestReconcile_HostileCheckNameIsDroppedUnderPrune(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		db.Host(t)
		settle(t, db, quiet)
		db.Exec(t, hostMarker)
		addHostileCheck(t, db)
		db.Exec(t, `INSERT INTO task_sessions (id, task_id) VALUES ('s1', 'k1')`)
		insertAmendedRow(t, db, "r1")
		negative := `UPDATE task_session_subagents SET total_tokens = -1 WHERE id = 'r1'`

		rep := mustReconcile(t, db, quiet)
		require.Len(t, rep.Drift, 1, describe(rep))
		_, err := db.DB.Exec(negative)
		require.Error(t, err, "kept, enforced")

		plan, err := reconcile.Plan(ctx, db.DB, reconcile.WithPrune())
		require.NoError(t, err)
		if db.Dialect == dialect.Postgres {
			schemaName := db.Strings(t, `SELECT current_schema()`)[0]
			require.Equal(t, []string{`ALTER TABLE ` + dialect.QuoteIdent(schemaName) + `."task_session_subagents" DROP CONSTRAINT "tokens"";DROP TABLE kandev_meta;--"`}, plan.Statements())
		}
		mustReconcile(t, db, quiet, reconcile.WithPrune())
		_, err = db.DB.Exec(negative)
		require.NoError(t, err, "dropped")
		requireHostIntact(t, db)
		require.Equal(t, []string{"r1"}, db.Strings(t, `SELECT id FROM task_session_subagents`))
		settle(t, db, quiet)
	})
}
