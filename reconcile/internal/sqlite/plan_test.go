package sqlite

import (
	"context"
	"slices"
	"strings"
	"testing"

	"ariga.io/atlas/sql/migrate"
	"ariga.io/atlas/sql/schema"
	atlassqlite "ariga.io/atlas/sql/sqlite"
	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/internal/ops"
	"github.com/schemastate/schemastate/reconcile/internal/core"
)

// The planning rules, with no database: a live and a declared table in,
// phases out. PlanTable is pure: what the live catalog says beyond Atlas's
// inspection arrives as facts, and Atlas's diff and rendering are its
// DefaultDiff and DefaultPlan.

// differPlanner is Atlas's database-free diff and rendering.
type differPlanner struct {
	schema.Differ
	migrate.PlanApplier
}

var ctx = context.Background()

// planTableCase is one table's planning: build makes the live table (nil
// for none) and the declared one afresh, as planning edits the live one.
type planTableCase struct {
	name        string
	live        func() *schema.Table
	want        func() *schema.Table
	facts       core.Facts
	onlineAbove int64
	check       func(t *testing.T, tp *core.TablePlan)
}

func runPlanCases(t *testing.T, drv core.Driver, cases []planTableCase) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			want := c.want()
			tp := &core.TablePlan{Table: want.Name, Want: want}
			if c.live != nil {
				tp.Live = c.live()
			}
			pc := &core.PlanContext{Atlas: differPlanner{atlassqlite.DefaultDiff, atlassqlite.DefaultPlan}, Schema: want.Schema.Name, File: "test.hcl", Driver: drv, OnlineAbove: c.onlineAbove}
			require.NoError(t, drv.PlanTable(pc, tp, c.facts))
			c.check(t, tp)
		})
	}
}

func phaseNames(tp *core.TablePlan) []string {
	var out []string
	for _, ph := range tp.Phases {
		out = append(out, ph.Step+":"+ph.Name)
	}
	return out
}

func guardKinds(ph ops.Phase) []ops.GuardKind {
	var out []ops.GuardKind
	for _, g := range ph.Guards {
		out = append(out, g.Kind)
	}
	return out
}

// sqliteT is a SQLite table t: id text primary key, a NOT NULL, b nullable,
// unique (a, b); more adds to it.
func sqliteT(more func(t *schema.Table)) func() *schema.Table {
	return func() *schema.Table {
		id, a, b := schema.NewStringColumn("id", "text"), schema.NewStringColumn("a", "text"), schema.NewNullStringColumn("b", "text")
		t := schema.NewTable("t").AddColumns(id, a, b).SetPrimaryKey(schema.NewPrimaryKey(id))
		t.AddIndexes(schema.NewUniqueIndex("t_a_b").AddColumns(a, b))
		schema.New("main").AddTables(t)
		if more != nil {
			more(t)
		}
		return t
	}
}

func column(t *schema.Table, name string) *schema.Column {
	c, _ := t.Column(name)
	return c
}

func TestPlanTable_SQLite(t *testing.T) {
	addNotNull := func(t *schema.Table) { t.AddColumns(schema.NewStringColumn("c", "text")) }
	runPlanCases(t, Driver{}, []planTableCase{
		{name: "a table that does not exist is one create phase", want: sqliteT(nil), check: func(t *testing.T, tp *core.TablePlan) {
			require.Equal(t, []string{"shape:create"}, phaseNames(tp))
			ph := tp.Phases[0]
			require.True(t, ph.Transactional)
			require.Equal(t, ops.LockSQLiteWrite, ph.Lock)
			require.True(t, strings.HasPrefix(ph.SQL[0], "CREATE TABLE"), ph.SQL[0])
		}},
		{name: "the declared shape plans nothing", live: sqliteT(nil), want: sqliteT(nil), check: func(t *testing.T, tp *core.TablePlan) {
			require.Empty(t, tp.Phases)
		}},
		{name: "an inline UNIQUE is the declared unique index", live: sqliteT(func(t *schema.Table) {
			t.Indexes[0].Name = "sqlite_autoindex_t_1"
		}), want: sqliteT(nil), check: func(t *testing.T, tp *core.TablePlan) {
			require.Empty(t, tp.Phases)
		}},
		{name: "a nullable column is an ALTER", live: sqliteT(nil), want: sqliteT(func(t *schema.Table) {
			t.AddColumns(schema.NewNullStringColumn("c", "text"))
		}), check: func(t *testing.T, tp *core.TablePlan) {
			require.Equal(t, []string{"shape:alter"}, phaseNames(tp))
			require.Empty(t, tp.Phases[0].Guards)
			require.Len(t, tp.Phases[0].SQL, 1)
			require.True(t, strings.HasPrefix(tp.Phases[0].SQL[0], "ALTER TABLE"), tp.Phases[0].SQL[0])
		}},
		{name: "a NOT NULL column without a default is a guarded rebuild", live: sqliteT(nil), want: sqliteT(addNotNull), check: func(t *testing.T, tp *core.TablePlan) {
			require.Equal(t, []string{"shape:rebuild"}, phaseNames(tp))
			ph := tp.Phases[0]
			require.Equal(t, ops.LockSQLiteWrite, ph.Lock)
			// No foreign key and nothing referencing t: the violation set
			// cannot change, so foreign_key_check is not run.
			require.Equal(t, []ops.GuardKind{ops.GuardRowsCopied, ops.GuardSetting}, guardKinds(ph))
			rows := ph.Guards[0]
			require.Equal(t, []string{`SELECT COUNT(*) FROM "t"`}, rows.SQL)
			at := slices.Index(ph.SQL, rows.Copy)
			require.Positive(t, at, "the copy the guard checks is the phase's")
			require.True(t, strings.HasPrefix(ph.SQL[at], `INSERT INTO "schemastate_new_t" ("id", "a", "b") SELECT "id", "a", "b" FROM "t"`), ph.SQL[at])
			require.Equal(t, []string{`DROP TABLE "t"`, `ALTER TABLE "schemastate_new_t" RENAME TO "t"`}, ph.SQL[at+1:at+3])
			require.Equal(t, []string{"PRAGMA legacy_alter_table", "PRAGMA legacy_alter_table = ON", "PRAGMA legacy_alter_table = %s"}, ph.Guards[1].SQL)
			require.Contains(t, core.Said(ph), "foreign_key_check skipped")
		}},
		{name: "a column an index covers is rebuilt, never Atlas's copy", live: sqliteT(nil), want: sqliteT(func(t *schema.Table) {
			c := schema.NewNullStringColumn("c", "text")
			t.AddColumns(c).AddIndexes(schema.NewIndex("t_c").AddColumns(c))
		}), check: func(t *testing.T, tp *core.TablePlan) {
			require.Equal(t, []string{"shape:rebuild"}, phaseNames(tp))
			require.NotContains(t, strings.Join(tp.Phases[0].SQL, "\n"), `"new_t"`, "Atlas's own copy path")
		}},
		{name: "a referenced table's rebuild checks foreign keys on both", live: sqliteT(nil), want: sqliteT(addNotNull),
			facts: facts{referencedBy: []string{"child"}}, check: func(t *testing.T, tp *core.TablePlan) {
				ph := tp.Phases[0]
				require.Equal(t, []ops.GuardKind{ops.GuardForeignKeys, ops.GuardRowsCopied, ops.GuardSetting}, guardKinds(ph))
				require.Equal(t, []string{`PRAGMA foreign_key_check("t")`, `PRAGMA foreign_key_check("child")`}, ph.Guards[0].SQL)
				require.Equal(t, "referenced by child", ph.Guards[0].Detail)
			}},
		{name: "a rebuild creates kept drift and triggers again", live: sqliteT(func(t *schema.Table) {
			t.AddIndexes(schema.NewIndex("t_b").AddColumns(column(t, "b")))
		}), want: sqliteT(addNotNull), facts: facts{
			indexSQL: map[string]string{"t_b": "CREATE INDEX t_b ON t (b)"},
			triggers: []string{"CREATE TRIGGER t_touch AFTER UPDATE ON t BEGIN SELECT 1; END"},
		}, check: func(t *testing.T, tp *core.TablePlan) {
			require.Equal(t, []core.Drift{{Table: "t", Kind: core.DriftIndex, Name: "t_b", Definition: "index (b)"}}, tp.Drift)
			sql := tp.Phases[0].SQL
			require.Contains(t, sql, "CREATE INDEX t_b ON t (b)", "the operator's own statement")
			require.Equal(t, "CREATE TRIGGER t_touch AFTER UPDATE ON t BEGIN SELECT 1; END", sql[len(sql)-1])
		}},
		{name: "a dropped column is refused and plans nothing", live: sqliteT(func(t *schema.Table) {
			t.AddColumns(schema.NewNullStringColumn("x", "text"))
		}), want: sqliteT(nil), check: func(t *testing.T, tp *core.TablePlan) {
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
			t.AddForeignKeys(schema.NewForeignKey("t_c_fk").AddColumns(c).SetRefTable(t).AddRefColumns(column(t, "id")))
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
			want := sqliteT(nil)()
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
	runPlanCases(t, Driver{}, []planTableCase{{name: "nullable id", live: sqliteT(func(t *schema.Table) {
		column(t, "id").Type.Null = true
	}), want: sqliteT(nil), check: func(t *testing.T, tp *core.TablePlan) {
		require.Equal(t, []string{"shape:rebuild"}, phaseNames(tp))
		ph := tp.Phases[0]
		require.Equal(t, []ops.GuardKind{ops.GuardNoNulls, ops.GuardRowsCopied, ops.GuardSetting}, guardKinds(ph), "the NULL check first, before anything changes")
		g := ph.Guards[0]
		require.Equal(t, "id", g.Column)
		require.Equal(t, []string{"rowid", "a", "b"}, g.Names)
		require.Equal(t, []string{`SELECT "rowid", "a", "b" FROM "t" WHERE "id" IS NULL LIMIT 1`}, g.SQL)
	}}})
}
