package transcript

import (
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/internal/contract"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
)

// The lifecycle writer's statements name exactly the columns writers.json's
// "transcript" writer says they do: its INSERT's list in order, its
// conflict target, and every column an UPDATE sets. A column added to a
// statement and not to the contract, or the other way round, fails here.
func TestLifecycle_StatementsAreTheContracts(t *testing.T) {
	w := dbtest.BuiltinWriter(t, "transcript")
	require.Equal(t, LifecycleTable, w.Table)

	insert := regexp.MustCompile(`(?s)INSERT INTO background_agent_log\s*\(([^)]*)\).*ON CONFLICT \(([^)]*)\)`).FindStringSubmatch(startSQL)
	require.NotNil(t, insert)
	require.Equal(t, w.Insert, contract.SplitList(insert[1]))
	require.Equal(t, w.Conflict, contract.SplitList(insert[2]))

	var set []string
	for _, stmt := range []string{endSQL, recordTranscriptSQL} {
		m := regexp.MustCompile(`(?s)SET (.*?)\s+WHERE`).FindStringSubmatch(stmt)
		require.NotNil(t, m, stmt)
		for _, a := range regexp.MustCompile(`(\w+) = `).FindAllStringSubmatch(m[1], -1) {
			set = append(set, a[1])
		}
	}
	require.ElementsMatch(t, w.Update, set)
}
