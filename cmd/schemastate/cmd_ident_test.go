package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
)

// hostileIndex is an operator's index name that read as SQL to Atlas's
// rendering: it names the host's index, then drops kandev_meta.
var hostileIndex = map[dialect.Dialect]string{
	dialect.Postgres: `idx_messages_created_at";DROP TABLE kandev_meta;--`,
	dialect.SQLite:   "idx_messages_created_at`;DROP TABLE kandev_meta;--",
}

// sqlLines are the lines of plan's text output that are SQL, not comments.
func sqlLines(out string) []string {
	var stmts []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line != "" && !strings.HasPrefix(line, "--") {
			stmts = append(stmts, line)
		}
	}
	return stmts
}

// plan --prune prints the drop of an index whose name holds a quote with
// the name quoted (the quote inside doubled), as the one statement it
// plans, in text and JSON; reconcile --prune runs it, and the host's index
// and kandev_meta keep their rows.
func TestCLI_PlanPrintsHostileIndexNameQuoted(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		reconciledByCLI(t, db)
		db.Exec(t, `INSERT INTO kandev_meta (key, value) VALUES ('host_marker', 'kept')`)
		name := hostileIndex[db.Dialect]
		_, err := db.DB.Exec("CREATE INDEX " + dialect.QuoteIdent(name) + " ON task_session_subagents (model)")
		require.NoError(t, err)
		drop := "DROP INDEX " + dialect.QuoteIdent(name)
		if db.Dialect == dialect.Postgres {
			drop = "DROP INDEX " + dialect.QuoteIdent(db.Strings(t, `SELECT current_schema()`)[0]) + "." + dialect.QuoteIdent(name)
		}

		code, out, stderr := cli(t, "plan", "--db", db.CLIDSN, "--prune")
		require.Equal(t, exitChangesPending, code, stderr)
		require.Equal(t, []string{drop + ";"}, sqlLines(out), out)

		code, out, _ = cli(t, "plan", "--db", db.CLIDSN, "--prune", "--json")
		require.Equal(t, exitChangesPending, code)
		var plan struct{ Statements []string }
		decodeJSON(t, out, &plan)
		require.Equal(t, []string{drop}, plan.Statements)

		code, _, stderr = cli(t, "reconcile", "--db", db.CLIDSN, "--prune")
		require.Equal(t, exitOK, code, stderr)
		require.Equal(t, []string{"kept"}, db.Strings(t, `SELECT value FROM kandev_meta WHERE key = 'host_marker'`))
		host := `SELECT name FROM sqlite_master WHERE type = 'index' AND name LIKE 'idx_messages_created_at%'`
		if db.Dialect == dialect.Postgres {
			host = `SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() AND indexname LIKE 'idx_messages_created_at%'`
		}
		require.Equal(t, []string{"idx_messages_created_at"}, db.Strings(t, host), "the host's index stays, the hostile one is dropped")
	})
}

// A schema.hcl whose table name holds a quote is refused by lint, plan and
// reconcile with its file:line,col; plan and lint print no statement, and
// the host's table keeps its row.
func TestCLI_PlanAndLintRefuseHostileDeclaredName(t *testing.T) {
	hcl := tempFile(t, "hostile.hcl", []byte(`variable "dialect" {
  type    = string
  default = "sqlite"
}

schema "main" {}

table "t\";DROP TABLE kandev_meta;--" {
  schema = schema.main
  column "id" {
    type = sql("text")
  }
}
`))
	code, out, stderr := cli(t, "lint", hcl, "--dialect", "sqlite")
	require.Equal(t, exitUsage, code, out)
	require.Contains(t, stderr, hcl+`:8,7: name refused`)
	require.Contains(t, stderr, `table "t\";DROP TABLE kandev_meta;--"`)
	require.Empty(t, sqlLines(out), out)

	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		db.Host(t)
		db.Exec(t, `INSERT INTO kandev_meta (key, value) VALUES ('host_marker', 'kept')`)
		for _, cmd := range []string{"plan", "reconcile"} {
			code, out, stderr := cli(t, cmd, "--db", db.CLIDSN, "--schema", hcl)
			require.NotEqual(t, exitOK, code, out)
			require.Contains(t, stderr+out, hcl+`:8,7: name refused`, cmd)
			if cmd == "plan" {
				require.Empty(t, out)
			}
		}
		require.Equal(t, []string{"kept"}, db.Strings(t, `SELECT value FROM kandev_meta WHERE key = 'host_marker'`))
	})
}
