package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/internal/testkit/dbtest"
)

func TestCLI_Bench_PrintsEachPointWithItsRatioAndWritesTheFiles(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		if db.Dialect == "sqlite" {
			db.Close() // bench replaces the file
		}
		out := t.TempDir()
		code, stdout, stderr := cli(t, "bench", "--db", db.CLIDSN, "--rows", "300", "--messages", "3000", "--rows-store-mb", "2",
			"--runs", "1", "--frames", "10", "--disk-mb", "4", "--no-cli", "--out", out)
		require.Equal(t, exitOK, code, stderr)
		// stderr is not a terminal here: progress comes as timestamped lines.
		require.Regexp(t, `(?m)^\d\d:\d\d:\d\d bench: generating a `, stderr)
		rebuild := "sqlite_rebuild"
		if db.Dialect == "postgres" {
			rebuild = "postgres_constraint_swap"
			require.Contains(t, stdout, "ACCESS EXCLUSIVE at 300 rows")
		}
		for _, line := range []string{rebuild + `\s+rows\s+300`, `steady_state_boot\s+rows\s+300`, `live_capture\s+rows\s+300`, `live_capture_8_writers\s+rows\s+300`,
			`health_queries\s+messages\s+3000`, `steady_state_boot\s+messages\s+3000`, `backfill\s+messages\s+3000`} {
			// name, family, n, ours, floor, ratio on one line
			require.Regexp(t, regexp.MustCompile(`(?m)^`+line+`\s+\S+\s+\S+\s+\d+\.\d\d×`), stdout)
		}
		require.Contains(t, stdout, "Go heap peak")
		for _, f := range []string{"report.json", "results.csv", "tables.md", rebuild + "-rows.svg", "backfill-messages.svg", "memory-rows.svg"} {
			b, err := os.ReadFile(filepath.Join(out, string(db.Dialect)+"-"+f))
			require.NoError(t, err, f)
			require.NotEmpty(t, b, f)
		}
		csv, err := os.ReadFile(filepath.Join(out, string(db.Dialect)+"-results.csv"))
		require.NoError(t, err)
		require.Contains(t, strings.SplitN(string(csv), "\n", 2)[0], "ratio_to_floor")

		code, _, stderr = cli(t, "bench", "--db", db.CLIDSN, "--rows", "300", "--messages", "0")
		require.Equal(t, exitNotEmpty, code, "the store is no longer empty")
		require.Contains(t, stderr, "empty database")
	})
}

func TestCLI_Bench_JSON(t *testing.T) {
	db := dbtest.Open(t, "sqlite")
	db.Close()
	code, out, stderr := cli(t, "bench", "--db", db.CLIDSN, "--rows", "300", "--messages", "0", "--rows-store-mb", "2",
		"--runs", "1", "--frames", "10", "--disk-mb", "4", "--no-cli", "--json")
	require.Equal(t, exitOK, code, stderr)
	var rep struct {
		Dialect      string
		Measurements []struct {
			Name  string
			N     int     `json:"n"`
			Ours  int64   `json:"ours_ns"`
			Floor int64   `json:"floor_ns"`
			Ratio float64 `json:"ratio"`
		}
	}
	decodeJSON(t, out, &rep, out)
	require.Len(t, rep.Measurements, 4)
	for _, m := range rep.Measurements {
		require.Equal(t, 300, m.N, m.Name)
		require.Positive(t, m.Ours, m.Name)
		require.Positive(t, m.Floor, m.Name)
		require.Positive(t, m.Ratio, m.Name)
	}

	// --render writes the files again from the stored report, measuring nothing.
	dir := t.TempDir()
	stored := filepath.Join(dir, "stored.json")
	require.NoError(t, os.WriteFile(stored, []byte(out), 0o644))
	code, _, stderr = cli(t, "bench", "--render", stored, "--out", dir, "--images", "img/")
	require.Equal(t, exitOK, code, stderr)
	tables, err := os.ReadFile(filepath.Join(dir, "sqlite-tables.md"))
	require.NoError(t, err)
	require.Contains(t, string(tables), "](img/sqlite-sqlite_rebuild-rows.svg)")
	require.Contains(t, string(tables), "| 300 |")
	svg, err := os.ReadFile(filepath.Join(dir, "sqlite-sqlite_rebuild-rows.svg"))
	require.NoError(t, err)
	require.Contains(t, string(svg), "<svg")
}

func TestSizes(t *testing.T) {
	got, err := sizes("", []int{1, 2})
	require.NoError(t, err)
	require.Equal(t, []int{1, 2}, got)
	got, err = sizes("0", []int{1, 2})
	require.NoError(t, err)
	require.Empty(t, got)
	got, err = sizes("1000, 300000", nil)
	require.NoError(t, err)
	require.Equal(t, []int{1000, 300000}, got)
	_, err = sizes("10,-1", nil)
	require.Error(t, err)
}

func TestCLI_Bench_OnlyTakesTheNamedMeasurements(t *testing.T) {
	db := dbtest.Open(t, "sqlite")
	db.Close()
	code, _, stderr := cli(t, "bench", "--db", db.CLIDSN, "--only", "backfill,no_such_bench")
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr, `"no_such_bench"`)
	require.NotContains(t, stderr, `"backfill"`, "a valid name is not reported unknown")
	require.Contains(t, stderr, "valid: sqlite_rebuild, postgres_constraint_swap, steady_state_boot, live_capture, live_capture_8_writers, health_queries, backfill, pooler_boot, pooler_steady_state_boot, pooler_live_capture, pooler_live_capture_8_writers")

	code, out, stderr := cli(t, "bench", "--db", db.CLIDSN, "--rows", "300", "--messages", "3000", "--rows-store-mb", "2",
		"--runs", "1", "--disk-mb", "4", "--no-cli", "--only", "backfill", "--json")
	require.Equal(t, exitOK, code, stderr)
	var rep struct {
		Measurements []struct{ Name, Family string }
		Skipped      []string
	}
	decodeJSON(t, out, &rep)
	require.Len(t, rep.Measurements, 1)
	require.Equal(t, "backfill", rep.Measurements[0].Name)
	require.Contains(t, strings.Join(rep.Skipped, "\n"), "every measurement but backfill (--only)")
}
