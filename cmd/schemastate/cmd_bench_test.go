package main

import (
	"encoding/json"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/internal/dbtest"
)

func TestCLI_Bench_PrintsEachMeasurementWithItsRatio(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		code, out, stderr := cli(t, "bench", "--db", db.CLIDSN, "--scale-mb", "2", "--population", "1", "--runs", "1", "--frames", "10")
		require.Equal(t, exitOK, code, stderr)
		rebuild := "sqlite_rebuild"
		if db.Dialect == "postgres" {
			rebuild = "postgres_constraint_swap"
			require.Contains(t, out, "ACCESS EXCLUSIVE held")
		}
		for _, name := range []string{rebuild, "health_queries", "steady_state_boot", "live_capture", "backfill"} {
			// name, ours, floor, ratio on one line
			require.Regexp(t, regexp.MustCompile(`(?m)^`+name+`\s+\S+\s+\S+\s+\d+\.\d\d×`), out)
		}
		require.Contains(t, out, "Go heap in use peak")

		code, _, stderr = cli(t, "bench", "--db", db.CLIDSN, "--scale-mb", "2")
		require.Equal(t, exitNotEmpty, code, "the store is no longer empty")
		require.Contains(t, stderr, "empty database")
	})
}

func TestCLI_Bench_JSON(t *testing.T) {
	db := dbtest.Open(t, "sqlite")
	code, out, stderr := cli(t, "bench", "--db", db.CLIDSN, "--scale-mb", "2", "--population", "1", "--runs", "1", "--frames", "10", "--json")
	require.Equal(t, exitOK, code, stderr)
	var rep struct {
		Dialect      string
		Measurements []struct {
			Name  string
			Ours  int64   `json:"ours_ns"`
			Floor int64   `json:"floor_ns"`
			Ratio float64 `json:"ratio"`
		}
	}
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	require.Len(t, rep.Measurements, 5)
	for _, m := range rep.Measurements {
		require.Positive(t, m.Ours, m.Name)
		require.Positive(t, m.Floor, m.Name)
		require.Positive(t, m.Ratio, m.Name)
	}
}
