package compat_test

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/contract"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/internal/tool/compat"
)

func TestMain(m *testing.M) { os.Exit(dbtest.Main(m)) }

func hcl(t *testing.T, old, new string) []byte { return dbtest.EditedSchema(t, old, new) }

// writers is the built-in contract with edit applied to its capture writer.
func writers(t *testing.T, edit func(w *contract.Writer)) *contract.Contract {
	return dbtest.EditedWriters(t, "edited writers.json", edit)
}

func without(list []string, name string) []string {
	return slices.DeleteFunc(slices.Clone(list), func(s string) bool { return s == name })
}

// check runs compat on one dialect: SQLite temporary files, or schemas on
// the test server.
func check(t *testing.T, d dialect.Dialect, base, next compat.Release) *compat.Report {
	t.Helper()
	cfg := compat.Config{Base: base, New: next, Frames: []string{"../../../testdata/frames/stream.ndjson"}}
	if d == dialect.Postgres {
		dbtest.Open(t, d) // skips (or fails in CI) without a server
		cfg.Server = dbtest.PostgresDSN()
	}
	rep, err := compat.Check(context.Background(), cfg)
	require.NoError(t, err)
	return rep
}

func run(t *testing.T, rep *compat.Report, d dialect.Dialect, scenario string) compat.Run {
	t.Helper()
	for _, r := range rep.Runs {
		if r.Dialect == d && r.Scenario == scenario {
			return r
		}
	}
	t.Fatalf("no %s run on %s: %+v", scenario, d, rep.Runs)
	return compat.Run{}
}

const lastIndex = "  index \"idx_subagents_turn_id\" {\n    columns = [column.turn_id]\n  }\n"

// Each edit a writer of either release cannot write is reported, frame by
// frame (file, line, ids, the database's error); the same change shipped in
// two releases as docs/parity-and-lint.md says reports nothing. Both
// dialects.
func TestCompat_ReportsEveryFrameEitherWriterCannotWrite(t *testing.T) {
	builtin := compat.Release{Name: "built in"}
	turnNotNull := dbtest.TurnIDNotNull(t)
	noModel := hcl(t, "  column \"model\" {\n    type = local.text\n    null = true\n  }\n  column \"agent_status\"", "  column \"agent_status\"")
	modelLess := writers(t, func(w *contract.Writer) {
		w.Insert, w.Update = without(w.Insert, "model"), without(w.Update, "model")
	})
	withDefault := hcl(t, lastIndex, lastIndex+"  column \"priority\" {\n    type    = local.text\n    null    = false\n    default = \"normal\"\n  }\n")
	for _, d := range []dialect.Dialect{dialect.SQLite, dialect.Postgres} {
		t.Run(string(d), func(t *testing.T) {
			// Two releases that agree: every frame with an identity written.
			rep := check(t, d, builtin, builtin)
			require.True(t, rep.Compatible(), "%+v", rep.Runs)
			for _, r := range rep.Runs {
				require.Equal(t, r.Frames-r.Skipped, r.Written)
				require.Greater(t, r.Written, 30)
			}

			// turn_id NOT NULL: the base release's writer, still running,
			// stores NULL for a frame without a turn id (AC-2a).
			rep = check(t, d, builtin, compat.Release{Name: "edited", HCL: turnNotNull})
			require.False(t, rep.Compatible())
			r := run(t, rep, d, compat.NewShapeBaseWriter)
			require.Contains(t, r.Refused, "writer-not-null: task_session_subagents.turn_id")
			require.Len(t, r.Failures, 1, "%+v", r.Failures)
			require.Equal(t, "toolu_o2", r.Failures[0].ToolCallID)
			require.Equal(t, 37, r.Failures[0].Line)
			require.Contains(t, r.Failures[0].Error, "turn_id")
			require.True(t, run(t, rep, d, compat.BaseShapeNewWriter).OK())

			// A column this release's writer names and the base shape lacks:
			// a new replica whose reconcile has not run loses every frame.
			rep = check(t, d, compat.Release{Name: "base", HCL: noModel, Writers: modelLess}, builtin)
			r = run(t, rep, d, compat.BaseShapeNewWriter)
			require.Contains(t, r.Refused, "writer-column: task_session_subagents.model")
			require.Equal(t, r.Frames-r.Skipped, len(r.Failures))
			require.True(t, run(t, rep, d, compat.NewShapeBaseWriter).OK(), "the base writer does not name model")

			// The two-release way of adding a column: declared with a
			// DEFAULT, which fills it for every writer that does not name it.
			rep = check(t, d, builtin, compat.Release{Name: "with default", HCL: withDefault})
			require.True(t, rep.Compatible(), "%+v", rep.Runs)
		})
	}
}

// Every edit the base release's writer fails on costs frames on the new
// shape, and compat names them: a check a reported zero breaks, a foreign
// key a child session precedes, a second unique key over part of the
// conflict target. Both dialects.
func TestCompat_EachWriterHazardLosesFramesAndIsNamed(t *testing.T) {
	builtin := compat.Release{Name: "built in"}
	for _, e := range []struct {
		name, add, refused string
	}{
		{"check", "  check \"tool_use_count_positive\" {\n    expr = \"tool_use_count > 0\"\n  }\n", "writer-check"},
		{"foreign key", "  foreign_key \"child_session_fk\" {\n    columns     = [column.child_session_id]\n    ref_columns = [table.task_sessions.column.id]\n  }\n", "writer-foreign-key"},
		{"unique", "  index \"uq_session_tool_call\" {\n    unique  = true\n    columns = [column.task_session_id, column.tool_call_id]\n  }\n", "writer-unique"},
	} {
		for _, d := range []dialect.Dialect{dialect.SQLite, dialect.Postgres} {
			t.Run(e.name+"/"+string(d), func(t *testing.T) {
				rep := check(t, d, builtin, compat.Release{Name: e.name, HCL: hcl(t, lastIndex, lastIndex+e.add)})
				r := run(t, rep, d, compat.NewShapeBaseWriter)
				require.Contains(t, r.Refused, e.refused)
				require.NotEmpty(t, r.Failures, "the table rejects some frame of the corpus")
				for _, f := range r.Failures {
					require.NotZero(t, f.Line)
					require.NotEmpty(t, f.Error)
				}
			})
		}
	}
}

// A base release without writers.json (it predates the contract) is not
// emulated: that scenario is skipped and said so; the other still runs.
func TestCompat_BaseWithoutContractIsSkippedAndSaid(t *testing.T) {
	rep := check(t, dialect.SQLite, compat.Release{Name: "old", NoWriters: true}, compat.Release{Name: "new"})
	require.Len(t, rep.Runs, 1)
	require.Equal(t, compat.BaseShapeNewWriter, rep.Runs[0].Scenario)
	require.Contains(t, strings.Join(rep.Skipped, "\n"), "old has no writers.json")
}
