package main

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/internal/testkit/dbtest"
)

func TestCLI_Generate_JSONSummaryAndRefusesAFullStore(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		code, out, stderr := cli(t, "generate", "--db", db.CLIDSN, "--scale-mb", "2", "--population", "1", "--state", "legacy", "--json")
		require.Equal(t, exitOK, code, stderr)
		require.Empty(t, stderr, "--json prints no progress")
		var sum struct {
			Dialect          string
			State            string
			SubagentMessages int `json:"subagent_messages"`
			LiveRows         int `json:"live_rows"`
			BackfillRows     int `json:"backfill_rows"`
			Population       struct {
				Status map[string]int
				FanOut map[string]int `json:"fan_out"`
			}
			Keys map[string]*string
		}
		decodeJSON(t, out, &sum, out)
		require.Equal(t, string(db.Dialect), sum.Dialect)
		require.Equal(t, "legacy", sum.State)
		require.Equal(t, 253, sum.SubagentMessages)
		require.Equal(t, 253, sum.LiveRows+sum.BackfillRows)
		require.Equal(t, 190, sum.Population.Status["async_launched"])
		require.Equal(t, 42, sum.Population.FanOut["3"])
		require.NotNil(t, sum.Keys["subagent_context_capture_since"])
		require.Nil(t, sum.Keys["subagent_context_execution_since"])

		// The rows are really there: the same count through the database.
		var n int
		require.NoError(t, db.QueryRow(`SELECT COUNT(*) FROM task_session_subagents`).Scan(&n))
		require.Equal(t, 253, n)

		code, _, stderr = cli(t, "generate", "--db", db.CLIDSN, "--scale-mb", "2")
		require.Equal(t, exitNotEmpty, code)
		require.Contains(t, stderr, "empty store")

		code, _, _ = cli(t, "generate", "--db", db.CLIDSN, "--scale-mb", "0")
		require.Equal(t, exitUsage, code)
	})
}

// Issue 12 §4: an unknown --state is a usage error, checked before --db is
// opened, so it leaves no file behind.
func TestCLI_Generate_UnknownStateIsUsageErrorAndWritesNoFile(t *testing.T) {
	path := tempPath(t, "new.db")
	code, _, stderr := cli(t, "generate", "--db", "sqlite:"+path, "--scale-mb", "1", "--state", "someday")
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr, `--state "someday": want predating, legacy or amended`)
	_, err := os.Stat(path)
	require.ErrorIs(t, err, os.ErrNotExist)
}
