package backfill

import (
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/contract"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
)

// The backfill's INSERT names exactly the columns, in order, and the
// conflict target that writers.json's "backfill" writer says it does, on
// both dialects, and writes the contract's source and execution sentinel.
// A column added to the statement and not the contract, or the other way
// round, fails here.
func TestBackfill_StatementIsTheContracts(t *testing.T) {
	w := dbtest.BuiltinWriter(t, "backfill")
	require.Equal(t, []string{Source}, w.Column("source").Values)
	require.Equal(t, []string{Unknown}, w.Column("agent_execution_id").Values)
	for _, d := range []dialect.Dialect{dialect.SQLite, dialect.Postgres} {
		stmts := dialects.Must(d)(1 << 20)
		m := regexp.MustCompile(`(?s)INSERT INTO task_session_subagents \((.*?)\)\s*SELECT.*ON CONFLICT \(([^)]*)\) DO NOTHING`).FindStringSubmatch(stmts.insert)
		require.NotNil(t, m, stmts.insert)
		require.Equal(t, w.Insert, contract.SplitList(m[1]), d)
		require.Equal(t, w.Conflict, contract.SplitList(m[2]), d)
		require.Empty(t, w.Update, "DO NOTHING updates no column")
	}
}
