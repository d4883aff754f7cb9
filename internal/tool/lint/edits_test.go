package lint

import (
	"testing"

	"github.com/schemastate/schemastate"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
)

// edit is a real change to schema.hcl: the built-in text with one
// replacement.
type edit struct {
	name     string
	old, new string
	// want maps "dialect/state" (or "dialect/declaration") to the hazards
	// expected there, where they differ from baseline; exit is the exit
	// code at the default --fail-on refused.
	want map[string][]string
	exit int
}

const subagents = "task_session_subagents"

// baseline is what every state plans with no edit at all: the
// pre-amendment table is rebuilt (SQLite) or gets its key and widened
// metrics in one transaction (PostgreSQL, small tables); the host's
// amended table has its metrics widened (PostgreSQL) or is rebuilt once for
// its nullable `id TEXT PRIMARY KEY` (SQLite, issue 22).
var baseline = map[string][]string{
	"sqlite/pre-amendment": {"sqlite-rebuild " + subagents},
	"sqlite/host-ddl":      {"sqlite-rebuild " + subagents},
	"postgres/pre-amendment": {
		"index-not-concurrent " + subagents + " index task_session_subagents_session_execution_tool_call_key",
		"table-rewrite " + subagents + ".duration_ms",
		"table-rewrite " + subagents + ".tool_use_count",
		"table-rewrite " + subagents + ".total_tokens",
	},
	"postgres/host-ddl": {
		"table-rewrite " + subagents + ".duration_ms",
		"table-rewrite " + subagents + ".tool_use_count",
		"table-rewrite " + subagents + ".total_tokens",
	},
}

const noteAfter = `  column "updated_at" {
    type = local.timestamp
    null = false
  }
`

var certificate = map[string][]string{"sqlite/declaration": {"certificate *"}, "postgres/declaration": {"certificate *"}}

// writersBreak is the declaration's hazards of an edit that the live writer
// and the backfill (both of this release, writers.json) would fail on: the
// certificate, what else is named, and each writer hazard once per writer.
func writersBreak(also []string, found ...string) map[string][]string {
	decl := append([]string{"certificate *"}, also...)
	for _, f := range found {
		decl = append(decl, f, f)
	}
	return map[string][]string{"sqlite/declaration": decl, "postgres/declaration": decl}
}

// with is m overlaid with each of more in turn; a later map's state wins.
func with(m map[string][]string, more ...map[string][]string) map[string][]string {
	out := map[string][]string{}
	for k, v := range m {
		out[k] = v
	}
	for _, o := range more {
		for k, v := range o {
			out[k] = v
		}
	}
	return out
}

func plus(key string, extra ...string) []string {
	return append(append([]string(nil), baseline[key]...), extra...)
}

// onPostgres is an edit's hazards found on every PostgreSQL installed base:
// beside the baseline's where it has one, alone on the old shape.
func onPostgres(found ...string) map[string][]string {
	return map[string][]string{
		"postgres/pre-amendment": plus("postgres/pre-amendment", found...),
		"postgres/host-ddl":      plus("postgres/host-ddl", found...),
		"postgres/old-shape":     found,
	}
}

// sqliteRebuild is an edit SQLite can only make by rebuilding the table:
// its hazards on every SQLite installed base, and the old shape, which the
// baseline leaves alone, rebuilt too.
func sqliteRebuild(found ...string) map[string][]string {
	return map[string][]string{
		"sqlite/pre-amendment": plus("sqlite/pre-amendment", found...),
		"sqlite/host-ddl":      plus("sqlite/host-ddl", found...),
		"sqlite/old-shape":     append(append([]string(nil), found...), "sqlite-rebuild "+subagents),
	}
}

var edits = []edit{
	{name: "touch nothing", exit: 0},
	{name: "add a nullable column", old: noteAfter, new: noteAfter + "  column \"note\" {\n    type = local.text\n    null = true\n  }\n",
		want: certificate, exit: 0},
	{name: "add a NOT NULL column with a default", old: noteAfter, new: noteAfter + "  column \"note\" {\n    type    = local.text\n    null    = false\n    default = \"\"\n  }\n",
		want: certificate, exit: 0},
	{name: "add a NOT NULL column without a default", old: noteAfter, new: noteAfter + "  column \"note\" {\n    type = local.text\n    null = false\n  }\n",
		// SQLite cannot ADD COLUMN … NOT NULL without a default: rebuild.
		want: with(writersBreak(nil, "writer-not-null "+subagents+".note"),
			sqliteRebuild("not-null-no-default "+subagents+".note"),
			onPostgres("not-null-no-default "+subagents+".note")), exit: 1},
	{name: "widen a type", old: "  column \"is_async\" {\n    type    = local.int\n", new: "  column \"is_async\" {\n    type    = local.int64\n",
		// integer and bigint are one type class on SQLite: no change there.
		want: with(certificate, onPostgres("table-rewrite "+subagents+".is_async")), exit: 0},
	{name: "narrow a type", old: "  column \"total_tokens\" {\n    type = local.int64\n", new: "  column \"total_tokens\" {\n    type = sql(\"smallint\")\n",
		// A refused table is left exactly as it is: its other changes go too.
		want: with(certificate, map[string][]string{
			"postgres/pre-amendment": {"type-change " + subagents + ".total_tokens"},
			"postgres/host-ddl":      {"type-change " + subagents + ".total_tokens"},
			"postgres/old-shape":     {"type-change " + subagents + ".total_tokens"},
		}), exit: 1},
	{name: "drop a column", old: "  column \"model\" {\n    type = local.text\n    null = true\n  }\n  column \"agent_status\"", new: "  column \"agent_status\"",
		want: with(writersBreak([]string{"drop-column " + subagents + ".model"}, "writer-column "+subagents+".model"), map[string][]string{
			"sqlite/pre-amendment":   {"drop-column " + subagents + ".model"},
			"sqlite/host-ddl":        {"drop-column " + subagents + ".model"},
			"sqlite/old-shape":       {"drop-column " + subagents + ".model"},
			"postgres/pre-amendment": {"drop-column " + subagents + ".model"},
			"postgres/host-ddl":      {"drop-column " + subagents + ".model"},
			"postgres/old-shape":     {"drop-column " + subagents + ".model"},
		}), exit: 1},
	{name: "add an index", old: "  index \"idx_subagents_turn_id\" {", new: "  index \"idx_subagents_model\" {\n    columns = [column.model]\n  }\n  index \"idx_subagents_turn_id\" {",
		want: with(certificate, onPostgres("index-not-concurrent "+subagents+" index idx_subagents_model")), exit: 0},
	{name: "add a unique", old: "  index \"idx_subagents_turn_id\" {", new: "  index \"task_session_subagents_agent_id_key\" {\n    unique  = true\n    columns = [column.agent_id]\n  }\n  index \"idx_subagents_turn_id\" {",
		// Neither writer bounds agent_id: a notice (exit 0), once per writer.
		want: with(writersBreak(nil, "writer-unique "+subagents+".agent_id index task_session_subagents_agent_id_key"),
			onPostgres("index-not-concurrent "+subagents+" index task_session_subagents_agent_id_key")), exit: 0},
	{name: "rename an index", old: `index "idx_subagents_task_id" {`, new: `index "idx_subagents_task" {`,
		want: with(certificate, onPostgres("index-not-concurrent "+subagents+" index idx_subagents_task")), exit: 0},
	{name: "redefine an index", old: "    columns = [column.task_id]\n", new: "    columns = [column.task_id, column.observed_at]\n",
		want: with(certificate, sqliteRebuild(), onPostgres("index-not-concurrent "+subagents+" index idx_subagents_task_id")), exit: 0},
	{name: "redefine the primary key", old: "  primary_key {\n    columns = [column.id]\n  }\n  foreign_key \"task_session_subagents_task_session_id_fkey\"", new: "  primary_key {\n    columns = [column.id, column.task_id]\n  }\n  foreign_key \"task_session_subagents_task_session_id_fkey\"",
		want: with(certificate, sqliteRebuild(), onPostgres("index-not-concurrent "+subagents+" index task_session_subagents_pkey")), exit: 0},
	{name: "edit a host table", old: "  comment = \"host: parent of task_session_subagents (FK target only)\"\n", new: "  comment = \"host: parent of task_session_subagents (FK target only)\"\n  column \"title\" {\n    type = local.text\n    null = true\n  }\n",
		want: with(certificate, map[string][]string{
			"sqlite/declaration":   {"certificate *", "host-table task_sessions"},
			"postgres/declaration": {"certificate *", "host-table task_sessions"},
		}), exit: 1},
	{name: "tighten a column to NOT NULL", old: "  column \"turn_id\" {\n    type = local.text\n    null = true\n  }\n", new: "  column \"turn_id\" {\n    type = local.text\n    null = false\n  }\n",
		// The host's own row holds a NULL turn_id: the tightening fails there.
		want: with(writersBreak(nil, "writer-not-null "+subagents+".turn_id"),
			sqliteRebuild("not-null-no-default "+subagents+".turn_id"),
			onPostgres("not-null-no-default "+subagents+".turn_id", "table-rewrite "+subagents+".turn_id")), exit: 1},
	{name: "add a column with a volatile default", old: noteAfter, new: noteAfter + "  column \"nonce\" {\n    type    = local.text\n    null    = true\n    default = local.pg ? sql(\"gen_random_uuid()\") : sql(\"(lower(hex(randomblob(16))))\")\n  }\n",
		// SQLite cannot ADD COLUMN with a non-constant default: rebuild.
		want: with(certificate, sqliteRebuild(), onPostgres("table-rewrite "+subagents+".nonce")), exit: 0},
	{name: "retire the upsert key", old: "  index \"task_session_subagents_session_execution_tool_call_key\" {\n    unique  = true\n", new: "  index \"task_session_subagents_session_execution_tool_call_key\" {\n    unique  = false\n",
		// The key becomes a plain index: rebuilt on SQLite, built beside the
		// host's own unique constraint (kept as undeclared) on PostgreSQL.
		want: with(writersBreak([]string{"end-state " + subagents}, "writer-conflict-target "+subagents), map[string][]string{
			"sqlite/old-shape":  {"sqlite-rebuild " + subagents},
			"postgres/host-ddl": plus("postgres/host-ddl", "index-not-concurrent "+subagents+" index task_session_subagents_session_execution_tool_call_key"),
			// The declared key redefined as a plain index: dropped and built
			// again inside the transaction on the small-table path.
			"postgres/old-shape": {"index-not-concurrent " + subagents + " index task_session_subagents_session_execution_tool_call_key"},
		}), exit: 1},
}

func (e edit) hcl(t *testing.T) []byte {
	if e.old == "" {
		return []byte(string(schemastate.SchemaHCL))
	}
	return dbtest.EditedSchema(t, e.old, e.new)
}

// builtinBase is the built-in schema.hcl as a base release's declaration.
func builtinBase() *Source {
	return &Source{HCL: schemastate.SchemaHCL, File: "base/schema.hcl"}
}

func label(h Hazard) string {
	s := h.Code + " " + h.Table
	if h.Column != "" {
		s += "." + h.Column
	}
	if h.Index != "" {
		s += " index " + h.Index
	}
	return s
}
