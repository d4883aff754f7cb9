package parity

import (
	"context"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/reconcile"
)

// parity --against reads a live store whose names are data: an operator's
// index named to close the inspector's string literal and run a statement
// is read as the name it is, and nothing is run. SQLite, where Atlas's
// inspector formats names into its catalog reads.
func TestAgainst_ReadsAHostileIndexNameAsData(t *testing.T) {
	db := dbtest.Open(t, dialect.SQLite)
	db.Host(t)
	_, err := reconcile.Reconcile(context.Background(), db.DB, reconcile.WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	db.Exec(t, `CREATE INDEX "x'); DROP TABLE task_sessions; --" ON task_session_subagents (model)`)
	rep, err := Against(context.Background(), db.DB, Config{})
	require.NoError(t, err)
	require.False(t, rep.Identical, "the undeclared index is a difference")
	var n int
	require.NoError(t, db.DB.QueryRow(`SELECT count(*) FROM sqlite_master WHERE name = 'task_sessions'`).Scan(&n))
	require.Equal(t, 1, n, "the name ran nothing")
}
