package contract_test

import (
	"slices"
	"strings"
	"testing"

	"ariga.io/atlas/sql/schema"
	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate"
	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/contract"
	"github.com/schemastate/schemastate/internal/declare"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
)

// edit is schema.hcl with old replaced by new.
func edit(t *testing.T, old, new string) []byte { return dbtest.EditedSchema(t, old, new) }

// addToSubagents adds blocks at the end of the task_session_subagents table.
func addToSubagents(t *testing.T, blocks string) []byte {
	return edit(t, "  index \"idx_subagents_turn_id\" {\n    columns = [column.turn_id]\n  }\n", "  index \"idx_subagents_turn_id\" {\n    columns = [column.turn_id]\n  }\n"+blocks)
}

// judgeDecl judges src's tables against the built-in writers named (all
// of them when none is).
func judgeDecl(t *testing.T, src []byte, d dialect.Dialect, names ...string) []contract.Finding {
	t.Helper()
	decl, err := declare.Eval(src, "edited.hcl", d, "main")
	require.NoError(t, err)
	c, err := contract.Builtin()
	require.NoError(t, err)
	var out []contract.Finding
	for i := range c.Writers {
		w := &c.Writers[i]
		if len(names) == 0 || slices.Contains(names, w.Name) {
			out = append(out, contract.Judge(w, contract.Table{T: decl.Table(w.Table)})...)
		}
	}
	return out
}

// postgresCapture is the built-in capture writer and the table the
// built-in declaration gives it on PostgreSQL.
func postgresCapture(t *testing.T) (*contract.Writer, *schema.Table) {
	t.Helper()
	decl, err := declare.Eval(schemastate.SchemaHCL, "schema.hcl", dialect.Postgres, "main")
	require.NoError(t, err)
	w := dbtest.BuiltinWriter(t, "capture")
	return w, decl.Table(w.Table)
}

// The built-in declaration is one every writer of this release writes
// every row to: no finding, not even a notice.
func TestJudge_BuiltinDeclarationFitsItsWriters(t *testing.T) {
	for _, d := range []dialect.Dialect{dialect.SQLite, dialect.Postgres} {
		require.Empty(t, judgeDecl(t, schemastate.SchemaHCL, d), d)
	}
}

// Each edit a writer would fail on is named, with its code, column or
// constraint and the frames that fail; edits it does not fail on are not.
func TestJudge_NamesEveryEditTheWriterFailsOn(t *testing.T) {
	turnNotNull := edit(t, "column \"turn_id\" {\n    type = local.text\n    null = true\n  }", "column \"turn_id\" {\n    type    = local.text\n    null    = false\n    default = \"\"\n  }")
	newNotNull := addToSubagents(t, "  column \"priority\" {\n    type = local.text\n    null = false\n  }\n")
	newNotNullDefault := addToSubagents(t, "  column \"priority\" {\n    type    = local.text\n    null    = false\n    default = \"normal\"\n  }\n")
	check := func(expr string) []byte {
		return addToSubagents(t, "  check \"ck\" {\n    expr = "+`"`+strings.ReplaceAll(expr, `"`, `\"`)+`"`+"\n  }\n")
	}
	childFK := addToSubagents(t, "  foreign_key \"child_fk\" {\n    columns     = [column.child_session_id]\n    ref_columns = [table.task_sessions.column.id]\n  }\n")
	twoColumnKey := edit(t, "columns = [column.task_session_id, column.agent_execution_id, column.tool_call_id]", "columns = [column.task_session_id, column.tool_call_id]")
	unique := func(cols string) []byte {
		return addToSubagents(t, "  index \"uq\" {\n    unique  = true\n    columns = ["+cols+"]\n  }\n")
	}
	type want struct {
		code, column string
		refused      bool
		frames       string
	}
	cases := []struct {
		name string
		src  []byte
		want []want
	}{
		{"turn_id NOT NULL with a default", turnNotNull, []want{{contract.CodeNotNull, "turn_id", true, "no turn id"}}},
		{"new NOT NULL column, no default", newNotNull, []want{{contract.CodeNotNull, "priority", true, "every insert"}}},
		{"new NOT NULL column with a default", newNotNullDefault, nil},
		{"check a reported zero breaks", check("tool_use_count > 0"), []want{{contract.CodeCheck, "tool_use_count", true, "tool-use count of 0"}}},
		{"check the zero meets", check("tool_use_count >= 0"), nil},
		{"check the least duration meets", check("duration_ms >= 0"), nil},
		{"check on a bounded set", check("source IN ('live', 'backfill')"), nil},
		{"check an open vocabulary breaks", check("tool_status IN ('completed', 'failed')"), []want{{contract.CodeCheck, "tool_status", true, "none of completed, failed"}}},
		{"check a value set breaks", check("is_async IN (1)"), []want{{contract.CodeCheck, "is_async", true, "is_async = 0"}}},
		{"check not empty", check("turn_id <> ''"), nil},
		{"check not null breaks", check("model IS NOT NULL"), []want{{contract.CodeCheck, "model", true, "no model"}}},
		{"check of another form", check("length(description) < 1000"), []want{{contract.CodeCheck, "description", false, ""}}},
		{"check over no written column", addToSubagents(t, "  column \"extra\" {\n    type = local.text\n    null = true\n  }\n  check \"ck\" {\n    expr = \"extra <> 'x'\"\n  }\n"), nil},
		{"foreign key a child session precedes", childFK, []want{{contract.CodeForeignKey, "child_session_id", true, "before it is written"}}},
		{"conflict target changed", twoColumnKey, []want{
			{contract.CodeConflictTarget, "", true, "every write"},
			{contract.CodeUnique, "task_session_id, tool_call_id", true, "agent_execution_id"},
		}},
		{"unique over part of the target", unique("column.task_session_id, column.tool_call_id"), []want{{contract.CodeUnique, "task_session_id, tool_call_id", true, "two agent_execution_id values"}}},
		{"unique the writer does not bound", unique("column.task_id"), []want{{contract.CodeUnique, "task_id", false, ""}}},
		{"unique over the generated id", unique("column.id, column.task_id"), nil},
		{"unique holding the whole target", unique("column.task_session_id, column.agent_execution_id, column.tool_call_id, column.turn_id"), nil},
	}
	for _, d := range []dialect.Dialect{dialect.SQLite, dialect.Postgres} {
		for _, c := range cases {
			t.Run(string(d)+"/"+c.name, func(t *testing.T) {
				got := judgeDecl(t, c.src, d, "capture")
				require.Len(t, got, len(c.want), "%v", got)
				for i, w := range c.want {
					require.Equal(t, w.code, got[i].Code, "%v", got[i])
					require.Equal(t, w.column, got[i].Column, "%v", got[i])
					require.Equal(t, w.refused, got[i].Refused, "%v", got[i])
					require.Contains(t, got[i].Frames, w.frames)
					require.Equal(t, "capture", got[i].Writer)
				}
			})
		}
	}
}

// The backfill is a writer too: the edits that break its rows are named for
// it, and its bounded values (source, the execution sentinel) are decided.
func TestJudge_TheBackfillIsJudgedToo(t *testing.T) {
	for _, d := range []dialect.Dialect{dialect.SQLite, dialect.Postgres} {
		got := judgeDecl(t, edit(t, "column \"turn_id\" {\n    type = local.text\n    null = true\n  }", "column \"turn_id\" {\n    type    = local.text\n    null    = false\n    default = \"\"\n  }"), d, "backfill")
		require.Len(t, got, 1)
		require.Equal(t, contract.CodeNotNull, got[0].Code)
		require.Equal(t, "backfill", got[0].Writer)
		require.Contains(t, got[0].Frames, "messages without a turn id")
		check := addToSubagents(t, "  check \"ck\" {\n    expr = \"source IN ('live')\"\n  }\n")
		got = judgeDecl(t, check, d)
		require.Len(t, got, 1, "the live writer writes only 'live'; the backfill 'backfill'")
		require.Equal(t, "backfill", got[0].Writer)
		require.Contains(t, got[0].Frames, "source = backfill")
	}
}

// A table that does not exist, and an INVALID unique index (a failed
// concurrent build), serve no writer.
func TestJudge_MissingTableAndInvalidKey(t *testing.T) {
	w, table := postgresCapture(t)
	got := contract.Judge(w, contract.Table{})
	require.Len(t, got, 1)
	require.Equal(t, contract.CodeTable, got[0].Code)

	got = contract.Judge(w, contract.Table{T: table, Invalid: map[string]bool{"task_session_subagents_session_execution_tool_call_key": true}})
	require.Len(t, got, 1, "%v", got)
	require.Equal(t, contract.CodeConflictTarget, got[0].Code)
	require.True(t, got[0].Refused)
}

// A writers.json that is not one is refused, saying where.
func TestParse_RefusesWhatItCannotRead(t *testing.T) {
	_, err := contract.Parse([]byte("{\n  \"format\": \"schemastate-writers/1\",\n  \"writers\": [ {\"name\": \"x\", \"table\": \"t\", \"insert\": [\"a\"], \"colums\": []} ]\n}"), "w.json")
	require.ErrorContains(t, err, "w.json")
	require.ErrorContains(t, err, "colums")
	_, err = contract.Parse([]byte("{\n  \"format\": \"schemastate-writers/1\",\n  \"writers\": [ {\"name\": \"x\", \"table\": \"t\", \"insert\": [\"a\"], \"columns\": []} ]\n}"), "w.json")
	require.ErrorContains(t, err, "column a is named by a statement but not described")
	_, err = contract.Parse([]byte("{\n  \"format\": 1\n}"), "w.json")
	require.ErrorContains(t, err, "line 2")
	_, err = contract.Parse([]byte(`{"format": "other/1", "writers": []}`), "w.json")
	require.ErrorContains(t, err, `format "other/1"`)
}

// A check as PostgreSQL's catalog renders it (what the writer's start
// reads) is decided as its declared form is.
func TestJudge_ChecksAsTheCatalogRendersThem(t *testing.T) {
	w, table := postgresCapture(t)
	for expr, refused := range map[string]bool{
		"(source = ANY (ARRAY['live'::text, 'backfill'::text]))": false,
		"(tool_status = ANY (ARRAY['completed'::text]))":         true,
		"((tool_use_count > 0))":                                 true,
		"(tool_use_count >= 0)":                                  false,
		"(length(agent_status) > 0)":                             false,
		"(\"model\" IS NOT NULL)":                                true,
		"(is_async = ANY (ARRAY[0, 1]))":                         false,
	} {
		tbl := *table
		tbl.Attrs = append(slices.Clone(tbl.Attrs), &schema.Check{Name: "ck", Expr: expr})
		got := contract.Judge(w, contract.Table{T: &tbl})
		require.Len(t, got, btoi(refused), "%s: %v", expr, got)
		if refused {
			require.Equal(t, contract.CodeCheck, got[0].Code)
			require.True(t, got[0].Refused, expr)
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
