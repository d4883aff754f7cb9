package declare_test

import (
	"context"
	"log/slog"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate"
	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/declare"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/reconcile"
)

// TestMain gives this package's PostgreSQL tests a database of their own.
func TestMain(m *testing.M) { os.Exit(dbtest.Main(m)) }

// liveColumns is table's columns as the database holds them, in order.
func liveColumns(t *testing.T, db *dbtest.DB, table string) []string {
	q := `SELECT name FROM pragma_table_info(?) ORDER BY cid`
	if db.Dialect == dialect.Postgres {
		q = `SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = ? ORDER BY ordinal_position`
	}
	return db.Strings(t, q, table)
}

// The lists are the tables a reconcile creates and the pre-amendment table
// the fixtures create, column for column, on both dialects.
func TestColumns_AreTheLiveTablesColumns(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		db.Host(t)
		_, err := reconcile.Reconcile(context.Background(), db.DB, reconcile.WithLogger(slog.New(slog.DiscardHandler)))
		require.NoError(t, err)
		for _, table := range []string{declare.Subagents, "background_agent_log"} {
			cols, err := declare.Columns(table)
			require.NoError(t, err)
			require.Equal(t, liveColumns(t, db, table), cols, table)
		}

		legacy := dbtest.Open(t, db.Dialect).Host(t).Legacy(t)
		cols, err := declare.PreAmendmentColumns()
		require.NoError(t, err)
		require.Equal(t, liveColumns(t, legacy, declare.Subagents), cols)
	})
}

// The names do not depend on the dialect the declaration is evaluated for.
func TestColumns_SameOnBothDialects(t *testing.T) {
	cols, err := declare.Columns(declare.Subagents)
	require.NoError(t, err)
	pg, err := declare.Eval(schemastate.SchemaHCL, "schema.hcl", dialect.Postgres, "public")
	require.NoError(t, err)
	var names []string
	for _, c := range pg.Table(declare.Subagents).Columns {
		names = append(names, c.Name)
	}
	require.Equal(t, names, cols)
}

// A table schema.hcl does not own is an error, never an empty list.
func TestColumns_UndeclaredTableIsAnError(t *testing.T) {
	_, err := declare.Columns("task_sessions")
	require.ErrorContains(t, err, "declares no owned table task_sessions")
}
