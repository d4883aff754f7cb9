package sqlite

import (
	"context"
	"slices"
	"strings"
	"testing"

	"ariga.io/atlas/sql/schema"
	atlassqlite "ariga.io/atlas/sql/sqlite"
	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/internal/ops"
	"github.com/schemastate/schemastate/reconcile/internal/core"
	"github.com/schemastate/schemastate/reconcile/internal/coretest"
)

// The planning rules, with no database (reconcile/internal/coretest).

var ctx = context.Background()

var atlas = coretest.Atlas{Differ: atlassqlite.DefaultDiff, PlanApplier: atlassqlite.DefaultPlan}

func TestPlanTable_SQLite(t *testing.T) {
	addNotNull := func(t *schema.Table) { t.AddColumns(schema.NewStringColumn("c", "text")) }
	coretest.RunPlanCases(t, Driver{}, atlas, []coretest.PlanCase{
		{Name: "a table that does not exist is one create phase", Want: coretest.SQLiteTable(nil), Check: func(t *testing.T, tp *core.TablePlan) {
			require.Equal(t, []string{"shape:create"}, coretest.PhaseNames(tp))
			ph := tp.Phases[0]
			require.True(t, ph.Transactional)
			require.Equal(t, ops.LockSQLiteWrite, ph.Lock)
			require.True(t, strings.HasPrefix(ph.SQL[0], "CREATE TABLE"), ph.SQL[0])
		}},
		{Name: "the declared shape plans nothing", Live: coretest.SQLiteTable(nil), Want: coretest.SQLiteTable(nil), Check: func(t *testing.T, tp *core.TablePlan) {
			require.Empty(t, tp.Phases)
		}},
		{Name: "an inline UNIQUE is the declared unique index", Live: coretest.SQLiteTable(func(t *schema.Table) {
			t.Indexes[0].Name = "sqlite_autoindex_t_1"
		}), Want: coretest.SQLiteTable(nil), Check: func(t *testing.T, tp *core.TablePlan) {
			require.Empty(t, tp.Phases)
		}},
		{Name: "a nullable column is an ALTER", Live: coretest.SQLiteTable(nil), Want: coretest.SQLiteTable(func(t *schema.Table) {
			t.AddColumns(schema.NewNullStringColumn("c", "text"))
		}), Check: func(t *testing.T, tp *core.TablePlan) {
			require.Equal(t, []string{"shape:alter"}, coretest.PhaseNames(tp))
			require.Empty(t, tp.Phases[0].Guards)
			require.Len(t, tp.Phases[0].SQL, 1)
			require.True(t, strings.HasPrefix(tp.Phases[0].SQL[0], "ALTER TABLE"), tp.Phases[0].SQL[0])
		}},
		{Name: "a NOT NULL column without a default is a guarded rebuild", Live: coretest.SQLiteTable(nil), Want: coretest.SQLiteTable(addNotNull), Check: func(t *testing.T, tp *core.TablePlan) {
			require.Equal(t, []string{"shape:rebuild"}, coretest.PhaseNames(tp))
			ph := tp.Phases[0]
			require.Equal(t, ops.LockSQLiteWrite, ph.Lock)
			// No foreign key and nothing referencing t: the violation set
			// cannot change, so foreign_key_check is not run.
			require.Equal(t, []ops.GuardKind{ops.GuardRowsCopied, ops.GuardSetting}, coretest.GuardKinds(ph))
			rows := ph.Guards[0]
			require.Equal(t, []string{`SELECT COUNT(*) FROM "t"`}, rows.SQL)
			at := slices.Index(ph.SQL, rows.Copy)
			require.Positive(t, at, "the copy the guard checks is the phase's")
			require.True(t, strings.HasPrefix(ph.SQL[at], `INSERT INTO "schemastate_new_t" ("id", "a", "b") SELECT "id", "a", "b" FROM "t"`), ph.SQL[at])
			require.Equal(t, []string{`DROP TABLE "t"`, `ALTER TABLE "schemastate_new_t" RENAME TO "t"`}, ph.SQL[at+1:at+3])
			require.Equal(t, []string{"PRAGMA legacy_alter_table", "PRAGMA legacy_alter_table = ON", "PRAGMA legacy_alter_table = %s"}, ph.Guards[1].SQL)
			require.Contains(t, core.Said(ph), "foreign_key_check skipped")
		}},
		{Name: "a column an index covers is rebuilt, never Atlas's copy", Live: coretest.SQLiteTable(nil), Want: coretest.SQLiteTable(func(t *schema.Table) {
			c := schema.NewNullStringColumn("c", "text")
			t.AddColumns(c).AddIndexes(schema.NewIndex("t_c").AddColumns(c))
		}), Check: func(t *testing.T, tp *core.TablePlan) {
			require.Equal(t, []string{"shape:rebuild"}, coretest.PhaseNames(tp))
			require.NotContains(t, strings.Join(tp.Phases[0].SQL, "\n"), `"new_t"`, "Atlas's own copy path")
		}},
		{Name: "a referenced table's rebuild checks foreign keys on both", Live: coretest.SQLiteTable(nil), Want: coretest.SQLiteTable(addNotNull),
			Facts: facts{referencedBy: []string{"child"}}, Check: func(t *testing.T, tp *core.TablePlan) {
				ph := tp.Phases[0]
				require.Equal(t, []ops.GuardKind{ops.GuardForeignKeys, ops.GuardRowsCopied, ops.GuardSetting}, coretest.GuardKinds(ph))
				require.Equal(t, []string{`PRAGMA foreign_key_check("t")`, `PRAGMA foreign_key_check("child")`}, ph.Guards[0].SQL)
				require.Equal(t, "referenced by child", ph.Guards[0].Detail)
			}},
		{Name: "a rebuild creates kept drift and triggers again", Live: coretest.SQLiteTable(func(t *schema.Table) {
			t.AddIndexes(schema.NewIndex("t_b").AddColumns(coretest.Column(t, "b")))
		}), Want: coretest.SQLiteTable(addNotNull), Facts: facts{
			indexSQL: map[string]string{"t_b": "CREATE INDEX t_b ON t (b)"},
			triggers: []string{"CREATE TRIGGER t_touch AFTER UPDATE ON t BEGIN SELECT 1; END"},
		}, Check: func(t *testing.T, tp *core.TablePlan) {
			require.Equal(t, []core.Drift{{Table: "t", Kind: core.DriftIndex, Name: "t_b", Definition: "index (b)"}}, tp.Drift)
			sql := tp.Phases[0].SQL
			require.Contains(t, sql, "CREATE INDEX t_b ON t (b)", "the operator's own statement")
			require.Equal(t, "CREATE TRIGGER t_touch AFTER UPDATE ON t BEGIN SELECT 1; END", sql[len(sql)-1])
		}},
		{Name: "a dropped column is refused and plans nothing", Live: coretest.SQLiteTable(func(t *schema.Table) {
			t.AddColumns(schema.NewNullStringColumn("x", "text"))
		}), Want: coretest.SQLiteTable(nil), Check: func(t *testing.T, tp *core.TablePlan) {
			require.Equal(t, []string{"t: would drop column x (test.hcl)"}, tp.Refused)
			require.Empty(t, tp.Phases)
		}},
	})
}

// atlasCopies is Atlas's own rule for rendering a column addition as a copy
// of the table, mirrored so the planner rebuilds instead: it must agree with
// what Atlas renders, column kind by column kind.
func TestPlan_SQLiteNeverRendersAtlasCopy(t *testing.T) {
	for _, c := range []struct {
		name string
		col  func(t *schema.Table) *schema.Column
	}{
		{"nullable", func(*schema.Table) *schema.Column { return schema.NewNullStringColumn("c", "text") }},
		{"constant default", func(*schema.Table) *schema.Column {
			return schema.NewStringColumn("c", "text").SetDefault(&schema.Literal{V: "'unknown'"})
		}},
		{"CURRENT_TIMESTAMP default", func(*schema.Table) *schema.Column {
			return schema.NewStringColumn("c", "text").SetDefault(&schema.Literal{V: "CURRENT_TIMESTAMP"})
		}},
		{"expression default", func(*schema.Table) *schema.Column {
			return schema.NewStringColumn("c", "text").SetDefault(&schema.RawExpr{X: "(lower('X'))"})
		}},
		{"indexed", func(t *schema.Table) *schema.Column {
			c := schema.NewNullStringColumn("c", "text")
			t.AddIndexes(schema.NewIndex("t_c").AddColumns(c))
			return c
		}},
		{"foreign key", func(t *schema.Table) *schema.Column {
			c := schema.NewNullStringColumn("c", "text")
			t.AddForeignKeys(schema.NewForeignKey("t_c_fk").AddColumns(c).SetRefTable(t).AddRefColumns(coretest.Column(t, "id")))
			return c
		}},
		{"stored generated", func(*schema.Table) *schema.Column {
			return schema.NewNullStringColumn("c", "text").SetGeneratedExpr(&schema.GeneratedExpr{Expr: "a || 'x'", Type: "STORED"})
		}},
		{"virtual generated", func(*schema.Table) *schema.Column {
			return schema.NewNullStringColumn("c", "text").SetGeneratedExpr(&schema.GeneratedExpr{Expr: "a || 'x'", Type: "VIRTUAL"})
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			want := coretest.SQLiteTable(nil)()
			col := c.col(want)
			want.AddColumns(col)
			p, err := atlassqlite.DefaultPlan.PlanChanges(ctx, "t", []schema.Change{&schema.ModifyTable{T: want, Changes: []schema.Change{&schema.AddColumn{C: col}}}})
			require.NoError(t, err)
			copies := false
			for _, ch := range p.Changes {
				copies = copies || strings.HasPrefix(ch.Cmd, "DROP TABLE")
			}
			require.Equal(t, copies, atlasCopies(col), "Atlas renders %q", p.Changes)
			if copies {
				require.True(t, needsCopy([]schema.Change{&schema.AddColumn{C: col}}), "rebuilt instead")
			}
		})
	}
}

// A nullable key the declaration makes NOT NULL (the host's own
// `id TEXT PRIMARY KEY`, which SQLite lets hold NULL) is rebuilt, and the
// rebuild first refuses a row holding NULL there, naming it by rowid and the
// declared unique key.
func TestPlanTable_SQLiteNullableKeyIsRebuiltRefusingNulls(t *testing.T) {
	coretest.RunPlanCases(t, Driver{}, atlas, []coretest.PlanCase{{Name: "nullable id", Live: coretest.SQLiteTable(func(t *schema.Table) {
		coretest.Column(t, "id").Type.Null = true
	}), Want: coretest.SQLiteTable(nil), Check: func(t *testing.T, tp *core.TablePlan) {
		require.Equal(t, []string{"shape:rebuild"}, coretest.PhaseNames(tp))
		ph := tp.Phases[0]
		require.Equal(t, []ops.GuardKind{ops.GuardNoNulls, ops.GuardRowsCopied, ops.GuardSetting}, coretest.GuardKinds(ph), "the NULL check first, before anything changes")
		g := ph.Guards[0]
		require.Equal(t, "id", g.Column)
		require.Equal(t, []string{"rowid", "a", "b"}, g.Names)
		require.Equal(t, []string{`SELECT "rowid", "a", "b" FROM "t" WHERE "id" IS NULL LIMIT 1`}, g.SQL)
	}}})
}
