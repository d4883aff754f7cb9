package lint

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate"
	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/hooks"
	"github.com/schemastate/schemastate/internal/ops"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/internal/tool/basestate"
	"github.com/schemastate/schemastate/internal/tool/dsn"
	"github.com/schemastate/schemastate/internal/tool/store"
	"github.com/schemastate/schemastate/reconcile"
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
	src := string(schemastate.SchemaHCL)
	if e.old == "" {
		return []byte(src)
	}
	require.Equal(t, 1, strings.Count(src, e.old), "the edit's anchor must occur once in schema.hcl")
	return []byte(strings.Replace(src, e.old, e.new, 1))
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

// Issue 14: each real edit × both dialects × every installed-base state
// plans the hazards it must, and lint's exit code at the default level
// follows them.
func TestLint_Edits_HazardsAndExitCode(t *testing.T) {
	dbtest.Open(t, dialect.Postgres) // skips (or fails in CI) without a server
	ctx := context.Background()
	for _, e := range edits {
		t.Run(e.name, func(t *testing.T) {
			base := Source{HCL: schemastate.SchemaHCL, File: "base/schema.hcl"}
			rep, err := Lint(ctx, Config{New: Source{HCL: e.hcl(t), File: "schema.hcl"}, Base: &base, DB: dbtest.PostgresDSN()})
			require.NoError(t, err)
			got := map[string][]string{}
			for _, h := range rep.Declaration {
				got[string(h.Dialect)+"/declaration"] = append(got[string(h.Dialect)+"/declaration"], label(h))
			}
			require.Len(t, rep.Runs, 2*len(States), "every dialect × state is planned")
			for _, run := range rep.Runs {
				for _, h := range run.Hazards {
					k := string(run.Dialect) + "/" + run.State
					got[k] = append(got[k], label(h))
				}
			}
			want := with(baseline, e.want)
			for k := range got {
				sort.Strings(got[k])
			}
			for k := range want {
				sort.Strings(want[k])
				if len(want[k]) == 0 {
					delete(want, k)
				}
			}
			require.Equal(t, want, got)
			require.Equal(t, e.exit, rep.Exit(LevelRefused))
			require.Equal(t, len(rep.Hazards()) > 0, rep.Exit(LevelNotice) == 1, "--fail-on any fails on any hazard")
		})
	}
}

// Issue 14: the plan lint prints for a state is what a reconcile of that
// state then runs, statement by statement — for every edit, dialect and
// state. A reconcile that fails part way (a NOT NULL column without a
// default meeting rows) has run a prefix of it.
func TestLint_Edits_PlanIsWhatReconcileRuns(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name  string
		d     dialect.Dialect
		extra []reconcile.Option
	}{
		{"sqlite", dialect.SQLite, nil},
		{"postgres", dialect.Postgres, nil},
		// Every table on the online path: CONCURRENTLY builds, the key swap,
		// expand/copy/contract.
		{"postgres-online", dialect.Postgres, []reconcile.Option{reconcile.WithOnlineAbove(0)}},
	} {
		d := c.d
		t.Run(c.name, func(t *testing.T) {
			server := ""
			if d == dialect.Postgres {
				dbtest.Open(t, d)
				server = dbtest.PostgresDSN()
			}
			for _, e := range edits {
				t.Run(e.name, func(t *testing.T) {
					newFile := filepath.Join(t.TempDir(), "schema.hcl")
					require.NoError(t, os.WriteFile(newFile, e.hcl(t), 0o600))
					sc, err := store.NewScratch(ctx, server, "lint")
					require.NoError(t, err)
					defer func() { require.NoError(t, sc.Close()) }()
					for _, state := range States {
						db, err := Build(ctx, sc, state, "", nil)
						require.NoError(t, err)
						run, err := PlanState(ctx, db, d, state, newFile, c.extra)
						require.NoError(t, err)
						var planned, ran []string
						for _, ph := range run.Phases {
							planned = append(planned, ph.SQL...)
						}
						// The plan is what runs once applied: the writers' check,
						// which refuses some of these edits before any phase, is
						// TestReconcile_RefusesAnEditThatBreaksItsOwnWriter's.
						opts := PlanOptions(d, newFile, append([]reconcile.Option{reconcile.WithLogger(slog.New(slog.DiscardHandler)), reconcile.WithAllowWriterBreak()}, c.extra...))
						rep, err := reconcile.Reconcile(hooks.With(ctx, hooks.Hooks{Executed: func(s string) { ran = append(ran, s) }}), db, opts...)
						if failedStep(rep, reconcile.StepShape) || failedStep(rep, reconcile.StepWiden) {
							require.True(t, hasCode(run, CodeNotNullNoDefault), "%s: an unexpected failure: %v", state, err)
							require.True(t, subsequence(ran, planned), "%s: what ran of a failed plan is some of its statements, in order:\nran %q\nplanned %q", state, ran, planned)
							continue
						}
						// A phase whose done-check already holds when its turn
						// comes is skipped (the plan prints the check): the
						// online copy of a table whose values are all NULL.
						if d == dialect.Postgres {
							did := map[string]bool{}
							for _, st := range rep.Steps {
								for _, id := range st.Phases {
									did[id] = true
								}
							}
							planned = nil
							for _, ph := range run.Phases {
								if !did[ph.ID()] {
									require.NotEmpty(t, ph.DoneWhen, "%s: phase %s has no done-check, yet did not run: %+v", state, ph.ID(), rep.Steps)
									continue
								}
								planned = append(planned, ph.SQL...)
							}
						}
						require.Equal(t, planned, ran, "%s: the plan is what the reconcile ran", state)
					}
				})
			}
		})
	}
}

func hasCode(r Run, code string) bool {
	for _, h := range r.Hazards {
		if h.Code == code {
			return true
		}
	}
	return false
}

func failedStep(rep *reconcile.Report, name string) bool {
	s := rep.Step(name)
	return s != nil && s.Status == reconcile.Failed
}

// subsequence reports whether xs appear in ys in the same order.
func subsequence(xs, ys []string) bool {
	i := 0
	for _, y := range ys {
		if i < len(xs) && xs[i] == y {
			i++
		}
	}
	return i == len(xs)
}

// lintOnline lints edit i (named name) against the built-in declaration on
// PostgreSQL with every table on the online path.
func lintOnline(t *testing.T, i int, name string) *Report {
	t.Helper()
	dbtest.Open(t, dialect.Postgres) // skips (or fails in CI) without a server
	e := edits[i]
	require.Equal(t, name, e.name)
	base := Source{HCL: schemastate.SchemaHCL, File: "base/schema.hcl"}
	rep, err := Lint(context.Background(), Config{New: Source{HCL: e.hcl(t), File: "schema.hcl"}, Base: &base,
		Dialects: []dialect.Dialect{dialect.Postgres}, DB: dbtest.PostgresDSN(), Options: []reconcile.Option{reconcile.WithOnlineAbove(0)}})
	require.NoError(t, err)
	return rep
}

// Issue 14: on the online path (a table at or above the threshold) an
// index is built CONCURRENTLY and a widening is expand/copy/contract: no
// index-not-concurrent, no table-rewrite for them.
func TestLint_OnlinePath_NoExclusiveBuild(t *testing.T) {
	rep := lintOnline(t, 7, "add an index")
	require.Len(t, rep.Runs, len(States))
	for _, run := range rep.Runs {
		if run.State == basestate.Predating.Name {
			continue
		}
		var builds []string
		for _, ph := range run.Phases {
			if ph.Name == ops.PhaseBuildIndex {
				builds = append(builds, ph.Object)
				require.Equal(t, CostRows, ph.Cost)
				require.False(t, ph.Transactional)
			}
		}
		require.Contains(t, builds, "idx_subagents_model", run.State)
		for _, h := range run.Hazards {
			require.NotEqual(t, CodeIndexNotConc, h.Code, "%s: %+v", run.State, h)
			require.NotEqual(t, CodeTableRewrite, h.Code, "%s: %+v", run.State, h)
		}
	}
}

// A dialect other than the two is refused before any store is built: it
// takes neither dialect's rules.
func TestLint_UnknownDialectIsAnError(t *testing.T) {
	_, err := Lint(context.Background(), Config{Dialects: []dialect.Dialect{"mysql"}})
	require.ErrorIs(t, err, ErrEvaluate)
	require.ErrorContains(t, err, `unsupported dialect "mysql"`)
	_, err = openReal(context.Background(), dsn.Target{Dialect: "mysql", Path: filepath.Join(t.TempDir(), "x.db")})
	require.ErrorContains(t, err, `unsupported dialect "mysql"`)
}

// On the online path an index redefined under its name is built beside it
// CONCURRENTLY and swapped in: no hazard of an exclusive build.
func TestLint_OnlinePath_RedefinedIndexSwappedIn(t *testing.T) {
	rep := lintOnline(t, 10, "redefine an index")
	swapped := 0
	for _, run := range rep.Runs {
		for _, ph := range run.Phases {
			if ph.Name == ops.PhaseSwapIndex && ph.Object == "idx_subagents_task_id" {
				swapped++
			}
		}
		for _, h := range run.Hazards {
			require.NotEqual(t, CodeIndexNotConc, h.Code, "%s: %+v", run.State, h)
		}
	}
	require.Positive(t, swapped, "a state holding the index swaps the new definition in")
}
