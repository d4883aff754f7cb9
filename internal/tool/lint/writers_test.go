package lint

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate"
	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/contract"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
)

// preAmendmentWriter is the writer of the release before the amendment, as
// a contract: no agent_execution_id, the two-column conflict target.
func preAmendmentWriter(t *testing.T) *contract.Contract {
	t.Helper()
	return dbtest.EditedWriters(t, "base:writers.json", func(w *contract.Writer) {
		w.Insert = slices.DeleteFunc(w.Insert, func(s string) bool { return s == "agent_execution_id" })
		w.Conflict = []string{"task_session_id", "tool_call_id"}
	})
}

func writerHazardsOf(rep *Report) []Hazard {
	var out []Hazard
	for _, h := range rep.Declaration {
		if strings.HasPrefix(h.Code, "writer-") {
			out = append(out, h)
		}
	}
	return out
}

// Lint names an edit the base release's writer would fail on, saying it is
// the base's (the amendment's own key change, for the writer of the release
// before it), on both dialects; with the same writer in both releases, or a
// change shipped the two-release way, nothing is named.
func TestLint_NamesTheBaseReleasesWriter(t *testing.T) {
	both := []dialect.Dialect{dialect.SQLite, dialect.Postgres}
	rep, err := Lint(context.Background(), Config{Dialects: both, Writers: Writers{Base: preAmendmentWriter(t)}})
	require.NoError(t, err)
	hs := writerHazardsOf(rep)
	require.Len(t, hs, 2, "%+v", hs)
	for i, d := range both {
		require.Equal(t, d, hs[i].Dialect)
		require.Equal(t, contract.CodeConflictTarget, hs[i].Code)
		require.Equal(t, LevelRefused, hs[i].Level)
		require.Contains(t, hs[i].Writer, "the base release's writer (capture, base:writers.json)")
		require.Contains(t, hs[i].Detail, "(task_session_id, tool_call_id)")
		require.Contains(t, hs[i].Advice, "two releases")
	}
	require.Equal(t, 1, rep.Exit(LevelRefused))

	builtin, err := contract.Builtin()
	require.NoError(t, err)
	withDefault := dbtest.EditedSchema(t, noteAfter, noteAfter+"  column \"note\" {\n    type    = local.text\n    null    = false\n    default = \"\"\n  }\n")
	for _, src := range [][]byte{nil, withDefault} {
		rep, err = Lint(context.Background(), Config{New: Source{HCL: src, File: "new.hcl"}, Dialects: both, Writers: Writers{Base: builtin}})
		require.NoError(t, err)
		require.Empty(t, writerHazardsOf(rep))
	}
}

// Issue 14: without a base, a declaration that does not reach AC-33's end
// state is still said (execution_since would never be written), and what
// needs a base is reported skipped.
func TestLint_NoBase_EndStateStillChecked(t *testing.T) {
	e := edits[len(edits)-1]
	require.Equal(t, "retire the upsert key", e.name)
	rep, err := Lint(context.Background(), Config{New: Source{HCL: e.hcl(t), File: "schema.hcl"}, Dialects: []dialect.Dialect{dialect.SQLite}})
	require.NoError(t, err)
	var codes []string
	for _, h := range rep.Declaration {
		codes = append(codes, h.Code)
	}
	require.Equal(t, []string{CodeEndState, contract.CodeConflictTarget, contract.CodeConflictTarget}, codes, "the end state, and the lost conflict target for the live writer and the backfill")
	require.Equal(t, LevelRefused, rep.Declaration[0].Level)
	require.Equal(t, 1, rep.Exit(LevelRefused))
	require.Len(t, rep.Runs, 3, "no old-shape state without a base")
	require.Contains(t, rep.Skipped[0], "no base declaration")

	rep, err = Lint(context.Background(), Config{Dialects: []dialect.Dialect{dialect.SQLite}})
	require.NoError(t, err)
	require.Empty(t, rep.Declaration, "the built-in declaration reaches the end state")
}

// GitWriters reads REF:writers.json, and a release from before the
// contract (no writers.json at REF) reads as none, not an error.
func TestGitWriters_AbsentAtAnOlderRelease(t *testing.T) {
	dir, git := dbtest.SchemaRepo(t) // the release before the contract
	require.NoError(t, os.WriteFile(filepath.Join(dir, contract.File), schemastate.WritersJSON, 0o600))
	git("add", ".")
	git("commit", "-qm", "the contract")
	c, err := GitWriters(context.Background(), dir, "HEAD~1")
	require.NoError(t, err)
	require.Nil(t, c)
	c, err = GitWriters(context.Background(), dir, "HEAD")
	require.NoError(t, err)
	require.NotNil(t, c.Writer("capture"))
	require.Equal(t, "HEAD:writers.json", c.Source)
	_, err = GitWriters(context.Background(), dir, "no-such-ref")
	require.Error(t, err)
}

// Each writer hazard is named for this release's writer and for the
// base's, each saying which, on both dialects: with the base's writers
// those of this release, every finding comes twice, once per release.
func TestLint_EachWriterHazardForBothReleases(t *testing.T) {
	const last = "  index \"idx_subagents_turn_id\" {\n    columns = [column.turn_id]\n  }\n"
	builtin, err := contract.Builtin()
	require.NoError(t, err)
	both := []dialect.Dialect{dialect.SQLite, dialect.Postgres}
	for _, e := range []struct {
		code, old, new string
	}{
		{contract.CodeNotNull, "column \"turn_id\" {\n    type = local.text\n    null = true\n  }", "column \"turn_id\" {\n    type    = local.text\n    null    = false\n    default = \"\"\n  }"},
		{contract.CodeNotNull, last, last + "  column \"priority\" {\n    type = local.text\n    null = false\n  }\n"},
		{contract.CodeConflictTarget, "columns = [column.task_session_id, column.agent_execution_id, column.tool_call_id]", "columns = [column.task_session_id, column.agent_execution_id, column.tool_call_id, column.turn_id]"},
		{contract.CodeCheck, last, last + "  check \"ck\" {\n    expr = \"tool_use_count > 0\"\n  }\n"},
		{contract.CodeForeignKey, last, last + "  foreign_key \"child_fk\" {\n    columns     = [column.child_session_id]\n    ref_columns = [table.task_sessions.column.id]\n  }\n"},
		{contract.CodeUnique, last, last + "  index \"uq\" {\n    unique  = true\n    columns = [column.task_session_id, column.tool_call_id]\n  }\n"},
	} {
		t.Run(e.code+"/"+e.new[len(e.new)-20:], func(t *testing.T) {
			src := dbtest.EditedSchema(t, e.old, e.new)
			rep, err := Lint(context.Background(), Config{New: Source{HCL: src, File: "new.hcl"}, Dialects: both, Writers: Writers{Base: builtin}})
			require.NoError(t, err)
			seen := map[string]int{}
			for _, h := range writerHazardsOf(rep) {
				if h.Code != e.code || !strings.Contains(h.Writer, "(capture, ") {
					continue
				}
				require.Equal(t, LevelRefused, h.Level, "%+v", h)
				require.NotEmpty(t, h.Advice)
				who := "this"
				if strings.HasPrefix(h.Writer, "the base release's writer") {
					who = "base"
				}
				seen[string(h.Dialect)+"/"+who]++
			}
			require.Equal(t, map[string]int{"sqlite/this": 1, "sqlite/base": 1, "postgres/this": 1, "postgres/base": 1}, seen)
			require.Equal(t, 1, rep.Exit(LevelRefused))
		})
	}
}
