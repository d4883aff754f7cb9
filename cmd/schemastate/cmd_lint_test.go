package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
)

type lintJSON struct {
	Base        string
	Declaration []struct{ Code, Level, Dialect string }
	Runs        []struct {
		Dialect, State string
		Phases         []struct {
			Name, Lock, Cost string
			Transactional    bool
			SQL              []string
		}
		Hazards []struct{ Code, Level, Table, Column string }
	}
	Skipped []string
}

// modelIndexed is src with one more index, idx_subagents_model, declared
// before idx_subagents_turn_id.
func modelIndexed(src string) string {
	return strings.Replace(src, "  index \"idx_subagents_turn_id\" {", "  index \"idx_subagents_model\" {\n    columns = [column.model]\n  }\n  index \"idx_subagents_turn_id\" {", 1)
}

// Issue 14: exit 0 below --fail-on, 1 at or above it, 2 for a declaration
// that does not evaluate (naming file:line) or a usage error; --json prints
// the report; without a PostgreSQL --db PostgreSQL is skipped and said so.
func TestCLI_Lint_ExitCodes(t *testing.T) {
	base := tempFile(t, "base.hcl", schemastate.SchemaHCL)
	src := string(schemastate.SchemaHCL)
	drop := strings.Replace(src, "  column \"model\" {\n    type = local.text\n    null = true\n  }\n  column \"agent_status\"", "  column \"agent_status\"", 1)
	require.NotEqual(t, src, drop)
	dropped := tempFile(t, "drop.hcl", []byte(drop))
	indexed := tempFile(t, "index.hcl", []byte(modelIndexed(src)))

	code, out, errOut := cli(t, "lint", "--base", base, dropped, "--dialect", "sqlite", "--json")
	require.Equal(t, 1, code, errOut)
	var rep lintJSON
	decodeJSON(t, out, &rep, out)
	require.Len(t, rep.Runs, 4)
	require.Equal(t, "old-shape", rep.Runs[3].State)
	require.Equal(t, "drop-column", rep.Runs[3].Hazards[0].Code)
	require.Equal(t, "model", rep.Runs[3].Hazards[0].Column)
	require.Equal(t, "create", rep.Runs[0].Phases[0].Name)
	require.Equal(t, "catalog-only", rep.Runs[0].Phases[0].Cost)

	// A NOT NULL-free index: below refused (exit 0), at rewrite on
	// PostgreSQL only, at any (the certificate) everywhere.
	code, out, errOut = cli(t, "lint", "--base", base, indexed, "--dialect", "sqlite")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "CREATE INDEX `idx_subagents_model`")
	renamed := tempFile(t, "rename.hcl", []byte(strings.Replace(src, `index "idx_subagents_task_id" {`, `index "idx_subagents_task" {`, 1)))
	code, out, errOut = cli(t, "lint", "--base", base, renamed, "--dialect", "sqlite")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "-- UNDECLARED (kept; reconcile --prune drops it): task_session_subagents.idx_subagents_task_id", "a renamed index leaves the old one, kept")
	code, _, _ = cli(t, "lint", "--base", base, indexed, "--dialect", "sqlite", "--fail-on", "any")
	require.Equal(t, 1, code)
	code, out, _ = cli(t, "lint", "--base", base, indexed)
	require.Equal(t, 0, code)
	require.Contains(t, out, "-- not checked: postgres: no PostgreSQL --db given")

	bad := tempFile(t, "bad.hcl", []byte("variable \"dialect\" {\n  type = string\n}\ntable \"x\" {\n  column \"a\" {\n    type = nosuch(\n  }\n}\n"))
	code, _, errOut = cli(t, "lint", bad, "--dialect", "sqlite")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, bad+":7,")

	for _, args := range [][]string{
		{"lint", "--fail-on", "sometimes"},
		{"lint", "--dialect", "oracle"},
		{"lint", "--dialect", "postgres"},
		{"lint", "--dialect", "postgres", "--db", "sqlite:" + base},
		{"lint", "--base", base, "--base-git", "HEAD"},
		{"lint", "a.hcl", "b.hcl"},
		{"lint", tempPath(t, "missing.hcl")},
	} {
		code, _, errOut := cli(t, args...)
		require.Equal(t, exitUsage, code, "%v: %s", args, errOut)
	}
}

// Issue 14: on PostgreSQL the stores are temporary schemas of --db, and a
// widening is a rewrite: --fail-on rewrite fails where refused does not.
func TestCLI_Lint_PostgresRewrite(t *testing.T) {
	dbtest.Open(t, "postgres")
	base := tempFile(t, "base.hcl", schemastate.SchemaHCL)
	widened := tempFile(t, "widen.hcl", []byte(strings.Replace(string(schemastate.SchemaHCL), "  column \"is_async\" {\n    type    = local.int\n", "  column \"is_async\" {\n    type    = local.int64\n", 1)))
	args := []string{"lint", "--base", base, widened, "--dialect", "postgres", "--db", dbtest.PostgresDSN()}
	code, out, errOut := cli(t, append(args, "--json")...)
	require.Equal(t, 0, code, errOut)
	var rep lintJSON
	decodeJSON(t, out, &rep, out)
	require.Len(t, rep.Runs, 4)
	old := rep.Runs[3]
	require.Equal(t, "old-shape", old.State)
	require.Len(t, old.Hazards, 1)
	require.Equal(t, "table-rewrite", old.Hazards[0].Code)
	require.Equal(t, "is_async", old.Hazards[0].Column)
	require.Equal(t, "widen", old.Phases[0].Name)
	require.Equal(t, "proportional-to-rows", old.Phases[0].Cost)
	code, _, _ = cli(t, append(args, "--fail-on", "rewrite")...)
	require.Equal(t, 1, code)
}

// Issue 14: a SQLite rebuild quotes the rows it will copy when --db points
// at a real store.
func TestCLI_Lint_RebuildRowsFromRealStore(t *testing.T) {
	db := dbtest.Open(t, "sqlite")
	code, _, errOut := cli(t, "demo", "--db", db.CLIDSN)
	require.Equal(t, exitOK, code, errOut)
	code, out, errOut := cli(t, "lint", "--dialect", "sqlite", "--db", db.CLIDSN, "--json")
	require.Equal(t, exitOK, code, errOut)
	var rep struct {
		Runs []struct {
			State   string
			Hazards []struct {
				Code string
				Rows *int64
			}
		}
	}
	decodeJSON(t, out, &rep, out)
	var rows *int64
	for _, r := range rep.Runs {
		for _, h := range r.Hazards {
			if r.State == "pre-amendment" && h.Code == "sqlite-rebuild" {
				rows = h.Rows
			}
		}
	}
	require.NotNil(t, rows, "the rebuild hazard quotes the store's rows")
	var n int64
	require.NoError(t, db.DB.QueryRow("SELECT count(*) FROM task_session_subagents").Scan(&n))
	require.Positive(t, n)
	require.Equal(t, n, *rows)
}

// lint --base-git REF without NEW.hcl reviews the working tree's schema.hcl
// against the committed one, not the declaration built into the binary, and
// says which declaration it read.
func TestCLI_Lint_BaseGitReadsTheWorkingTree(t *testing.T) {
	dir, git := dbtest.SchemaRepo(t)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "schema.hcl"), []byte(modelIndexed(string(schemastate.SchemaHCL))), 0o644))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "sub"), 0o755))
	t.Chdir(filepath.Join(dir, "sub")) // the repository's top level is found from below it too

	code, out, errOut := cli(t, "lint", "--base-git", "HEAD", "--dialect", "sqlite")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "lint "+filepath.Join(dir, "schema.hcl")+" against base HEAD:schema.hcl")
	require.Contains(t, out, "idx_subagents_model", "the working tree's edit is linted")

	// With nothing edited there is nothing to review beyond the base.
	git("checkout", "-q", "--", "schema.hcl")
	code, out, errOut = cli(t, "lint", "--base-git", "HEAD", "--dialect", "sqlite")
	require.Equal(t, 0, code, errOut)
	require.NotContains(t, out, "idx_subagents_model")
}
