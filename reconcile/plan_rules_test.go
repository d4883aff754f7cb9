package reconcile

import (
	"context"
	"slices"
	"strings"
	"testing"

	"ariga.io/atlas/sql/migrate"
	"ariga.io/atlas/sql/postgres"
	"ariga.io/atlas/sql/schema"
	"ariga.io/atlas/sql/sqlite"
	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/declare"
	"github.com/schemastate/schemastate/internal/describe"
	"github.com/schemastate/schemastate/internal/ops"
	"github.com/schemastate/schemastate/reconcile/internal/core"
)

// The planning rules, with no database: a live and a declared table in,
// phases out. planTable is pure (driver.planTable): what the live catalog
// says beyond Atlas's inspection arrives as tableFacts, and Atlas's diff and
// rendering are its DefaultDiff and DefaultPlan.

// differPlanner is Atlas's database-free diff and rendering for a dialect.
type differPlanner struct {
	schema.Differ
	migrate.PlanApplier
}

var ctx = context.Background()

func atlasFor(d dialect.Dialect) atlasPlanner {
	if d == dialect.Postgres {
		return differPlanner{postgres.DefaultDiff, postgres.DefaultPlan}
	}
	return differPlanner{sqlite.DefaultDiff, sqlite.DefaultPlan}
}

// driverOf is the dialect's driver.
func driverOf(d dialect.Dialect) driver {
	drv, err := driverFor(d)
	if err != nil {
		panic(err)
	}
	return drv
}

// planTableCase is one table's planning: build makes the live table (nil
// for none) and the declared one afresh, as planning edits the live one.
type planTableCase struct {
	name        string
	live        func() *schema.Table
	want        func() *schema.Table
	facts       core.Facts
	onlineAbove int64
	check       func(t *testing.T, tp *tablePlan)
}

func runPlanCases(t *testing.T, drv driver, cases []planTableCase) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			want := c.want()
			tp := &tablePlan{Table: want.Name, Want: want}
			if c.live != nil {
				tp.Live = c.live()
			}
			pc := &planContext{Atlas: atlasFor(drv.Dialect()), Schema: want.Schema.Name, File: "test.hcl", Driver: drv, OnlineAbove: c.onlineAbove}
			require.NoError(t, drv.PlanTable(pc, tp, c.facts))
			c.check(t, tp)
		})
	}
}

func phaseNames(tp *tablePlan) []string {
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
	runPlanCases(t, sqliteDriver{}, []planTableCase{
		{name: "a table that does not exist is one create phase", want: sqliteT(nil), check: func(t *testing.T, tp *tablePlan) {
			require.Equal(t, []string{"shape:create"}, phaseNames(tp))
			ph := tp.Phases[0]
			require.True(t, ph.Transactional)
			require.Equal(t, ops.LockSQLiteWrite, ph.Lock)
			require.True(t, strings.HasPrefix(ph.SQL[0], "CREATE TABLE"), ph.SQL[0])
		}},
		{name: "the declared shape plans nothing", live: sqliteT(nil), want: sqliteT(nil), check: func(t *testing.T, tp *tablePlan) {
			require.Empty(t, tp.Phases)
		}},
		{name: "an inline UNIQUE is the declared unique index", live: sqliteT(func(t *schema.Table) {
			t.Indexes[0].Name = "sqlite_autoindex_t_1"
		}), want: sqliteT(nil), check: func(t *testing.T, tp *tablePlan) {
			require.Empty(t, tp.Phases)
		}},
		{name: "a nullable column is an ALTER", live: sqliteT(nil), want: sqliteT(func(t *schema.Table) {
			t.AddColumns(schema.NewNullStringColumn("c", "text"))
		}), check: func(t *testing.T, tp *tablePlan) {
			require.Equal(t, []string{"shape:alter"}, phaseNames(tp))
			require.Empty(t, tp.Phases[0].Guards)
			require.Len(t, tp.Phases[0].SQL, 1)
			require.True(t, strings.HasPrefix(tp.Phases[0].SQL[0], "ALTER TABLE"), tp.Phases[0].SQL[0])
		}},
		{name: "a NOT NULL column without a default is a guarded rebuild", live: sqliteT(nil), want: sqliteT(addNotNull), check: func(t *testing.T, tp *tablePlan) {
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
			require.Contains(t, said(ph), "foreign_key_check skipped")
		}},
		{name: "a column an index covers is rebuilt, never Atlas's copy", live: sqliteT(nil), want: sqliteT(func(t *schema.Table) {
			c := schema.NewNullStringColumn("c", "text")
			t.AddColumns(c).AddIndexes(schema.NewIndex("t_c").AddColumns(c))
		}), check: func(t *testing.T, tp *tablePlan) {
			require.Equal(t, []string{"shape:rebuild"}, phaseNames(tp))
			require.NotContains(t, strings.Join(tp.Phases[0].SQL, "\n"), `"new_t"`, "Atlas's own copy path")
		}},
		{name: "a referenced table's rebuild checks foreign keys on both", live: sqliteT(nil), want: sqliteT(addNotNull),
			facts: sqliteFacts{referencedBy: []string{"child"}}, check: func(t *testing.T, tp *tablePlan) {
				ph := tp.Phases[0]
				require.Equal(t, []ops.GuardKind{ops.GuardForeignKeys, ops.GuardRowsCopied, ops.GuardSetting}, guardKinds(ph))
				require.Equal(t, []string{`PRAGMA foreign_key_check("t")`, `PRAGMA foreign_key_check("child")`}, ph.Guards[0].SQL)
				require.Equal(t, "referenced by child", ph.Guards[0].Detail)
				require.Equal(t, "rebuilt t", said(ph))
			}},
		{name: "a rebuild creates kept drift and triggers again", live: sqliteT(func(t *schema.Table) {
			t.AddIndexes(schema.NewIndex("t_b").AddColumns(column(t, "b")))
		}), want: sqliteT(addNotNull), facts: sqliteFacts{
			indexSQL: map[string]string{"t_b": "CREATE INDEX t_b ON t (b)"},
			triggers: []string{"CREATE TRIGGER t_touch AFTER UPDATE ON t BEGIN SELECT 1; END"},
		}, check: func(t *testing.T, tp *tablePlan) {
			require.Equal(t, []Drift{{Table: "t", Kind: core.DriftIndex, Name: "t_b", Definition: "index (b)"}}, tp.Drift)
			sql := tp.Phases[0].SQL
			require.Contains(t, sql, "CREATE INDEX t_b ON t (b)", "the operator's own statement")
			require.Equal(t, "CREATE TRIGGER t_touch AFTER UPDATE ON t BEGIN SELECT 1; END", sql[len(sql)-1])
		}},
		{name: "a dropped column is refused and plans nothing", live: sqliteT(func(t *schema.Table) {
			t.AddColumns(schema.NewNullStringColumn("x", "text"))
		}), want: sqliteT(nil), check: func(t *testing.T, tp *tablePlan) {
			require.Equal(t, []string{"t: would drop column x (test.hcl)"}, tp.Refused)
			require.Empty(t, tp.Phases)
		}},
	})
}

// pgT is a PostgreSQL table t: id text primary key, a and b NOT NULL, and
// the unique constraint key names; more adds to it.
func pgT(key string, keyCols []string, more func(t *schema.Table)) func() *schema.Table {
	return func() *schema.Table {
		id := schema.NewStringColumn("id", "text")
		t := schema.NewTable("t").AddColumns(id, schema.NewStringColumn("a", "text"), schema.NewStringColumn("b", "text")).SetPrimaryKey(schema.NewPrimaryKey(id))
		schema.New("public").AddTables(t)
		if more != nil {
			more(t)
		}
		if key != "" {
			idx := schema.NewUniqueIndex(key)
			for _, c := range keyCols {
				idx.AddColumns(column(t, c))
			}
			t.AddIndexes(idx)
		}
		declare.UniqueConstraints(t)
		return t
	}
}

func TestPlanTable_Postgres(t *testing.T) {
	withC := func(t *schema.Table) {
		t.AddColumns(schema.NewStringColumn("c", "text").SetDefault(&schema.Literal{V: "'unknown'"}))
	}
	legacy := pgT("t_a_b_key", []string{"a", "b"}, nil)
	declared := pgT("t_a_c_b_key", []string{"a", "c", "b"}, withC)
	size := tableSize{bytes: 1 << 20, rows: 1000, version: 160000}
	// What a boot stopped before swap_key leaves: the column, and the key's
	// index built as a plain unique index, not yet the constraint.
	builtNotKey := func() *schema.Table {
		t := pgT("", nil, withC)()
		t.AddIndexes(schema.NewUniqueIndex("t_a_c_b_key").AddColumns(column(t, "a"), column(t, "c"), column(t, "b")))
		return t
	}
	runPlanCases(t, postgresDriver{}, []planTableCase{
		{name: "a table under the threshold changes in one transaction", live: legacy, want: declared, facts: tableFacts{size: size}, onlineAbove: 1 << 30,
			check: func(t *testing.T, tp *tablePlan) {
				require.Equal(t, []string{"shape:alter"}, phaseNames(tp))
				require.Equal(t, ops.LockRewrite, tp.Phases[0].Lock)
				require.Contains(t, tp.Phases[0].Detail, "under the online threshold")
			}},
		{name: "a table at the threshold builds the key concurrently and swaps it", live: legacy, want: declared, facts: tableFacts{size: size},
			check: func(t *testing.T, tp *tablePlan) {
				require.Equal(t, []string{"shape:alter", "shape:build_index", "shape:swap_key"}, phaseNames(tp))
				alter, build, swap := tp.Phases[0], tp.Phases[1], tp.Phases[2]
				require.Equal(t, ops.LockCatalog, alter.Lock, "a constant default is catalog-only")
				require.False(t, build.Transactional)
				require.Equal(t, []string{"a", "c", "b"}, build.Key)
				require.Equal(t, []string{`CREATE UNIQUE INDEX CONCURRENTLY "t_a_c_b_key" ON "public"."t" ("a", "c", "b")`}, build.SQL)
				require.NotEmpty(t, build.DoneWhen)
				require.Equal(t, []string{`ALTER TABLE "public"."t" DROP CONSTRAINT "t_a_b_key", ADD CONSTRAINT "t_a_c_b_key" UNIQUE USING INDEX "t_a_c_b_key"`}, swap.SQL)
			}},
		{name: "the declared key under another name is renamed, catalog-only", live: pgT("t_auto_key", []string{"a", "c", "b"}, withC), want: declared, facts: tableFacts{size: size},
			check: func(t *testing.T, tp *tablePlan) {
				require.Equal(t, []string{"shape:alter"}, phaseNames(tp))
				require.Equal(t, []string{`ALTER TABLE "public"."t" RENAME CONSTRAINT "t_auto_key" TO "t_a_c_b_key"`}, tp.Phases[0].SQL)
				require.Equal(t, ops.LockCatalog, tp.Phases[0].Lock)
			}},
		{name: "a deferrable declared key is dropped and built again", live: pgT("t_a_c_b_key", []string{"a", "c", "b"}, withC), want: declared,
			facts: tableFacts{size: size, deferrable: map[string]bool{"t_a_c_b_key": true}},
			check: func(t *testing.T, tp *tablePlan) {
				require.Equal(t, []string{"shape:alter", "shape:build_index", "shape:swap_key"}, phaseNames(tp))
				require.Equal(t, []string{`ALTER TABLE "public"."t" DROP CONSTRAINT "t_a_c_b_key"`}, tp.Phases[0].SQL)
				require.Equal(t, ops.LockRewrite, tp.Phases[0].Lock, "dropping the key is not the rename")
			}},
		{name: "a NULL tightened to its default is filled in batches, then SET NOT NULL through a validated check", live: pgT("t_a_c_b_key", []string{"a", "c", "b"}, func(t *schema.Table) {
			t.AddColumns(schema.NewNullStringColumn("c", "text").SetDefault(&schema.Literal{V: "'unknown'"}))
		}), want: declared, facts: tableFacts{size: size},
			check: func(t *testing.T, tp *tablePlan) {
				require.Equal(t, []string{"shape:fill", "shape:check_rows", "shape:add_not_valid", "shape:validate", "shape:set_not_null"}, phaseNames(tp))
				require.Equal(t, `UPDATE "public"."t" SET "c" = DEFAULT WHERE ctid >= $1::text::tid AND ctid < $2::text::tid AND "c" IS NULL`, tp.Phases[0].SQL[0])
				require.Equal(t, []ops.Kind{ops.KindBatched, ops.KindCheckRows, ops.KindStatements, ops.KindOwnTx, ops.KindStatements}, []ops.Kind{tp.Phases[0].Kind, tp.Phases[1].Kind, tp.Phases[2].Kind, tp.Phases[3].Kind, tp.Phases[4].Kind})
				require.Equal(t, []ops.LockClass{ops.LockRows, ops.LockNone, ops.LockCatalog, ops.LockShareUpdateExclusive, ops.LockCatalog}, []ops.LockClass{tp.Phases[0].Lock, tp.Phases[1].Lock, tp.Phases[2].Lock, tp.Phases[3].Lock, tp.Phases[4].Lock})
				require.Equal(t, []string{`ALTER TABLE "public"."t" ALTER COLUMN "c" SET NOT NULL`, `ALTER TABLE "public"."t" DROP CONSTRAINT IF EXISTS "schemastate_nn_c"`}, tp.Phases[4].SQL)
			}},
		{name: "an index built but not yet the key resumes online whatever the size", live: builtNotKey, want: declared, facts: tableFacts{size: tableSize{bytes: 8 << 10, version: 160000}}, onlineAbove: 1 << 30,
			check: func(t *testing.T, tp *tablePlan) {
				require.Equal(t, []string{"index t_a_c_b_key built, not yet the key"}, tp.Resumed)
				require.Equal(t, []string{"shape:build_index", "shape:swap_key"}, phaseNames(tp))
				require.Contains(t, tp.Phases[0].Detail, "resuming an online upgrade")
			}},
		{name: "an INVALID build is dropped before it is built again", live: builtNotKey, want: declared, facts: tableFacts{size: size, invalid: []string{"t_a_c_b_key", "t_operator_idx"}},
			check: func(t *testing.T, tp *tablePlan) {
				require.Equal(t, []string{"INVALID index t_a_c_b_key (dropped and rebuilt)"}, tp.Resumed, "an undeclared INVALID index is not ours")
				require.Equal(t, []string{"shape:build_index", "shape:swap_key"}, phaseNames(tp))
				require.Equal(t, `DROP INDEX CONCURRENTLY IF EXISTS "public"."t_a_c_b_key"`, tp.Phases[0].SQL[0])
			}},
		{name: "a table that does not exist is one create phase", want: declared, check: func(t *testing.T, tp *tablePlan) {
			require.Equal(t, []string{"shape:create"}, phaseNames(tp))
			require.Equal(t, ops.LockCatalog, tp.Phases[0].Lock)
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
			p, err := sqlite.DefaultPlan.PlanChanges(ctx, "t", []schema.Change{&schema.ModifyTable{T: want, Changes: []schema.Change{&schema.AddColumn{C: col}}}})
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

// One describer of indexes and foreign keys: the forms drift reports (and a
// certificate stores), IndexSet lists and comparisons read.
func TestDescribe_IndexAndForeignKeyForms(t *testing.T) {
	tbl := sqliteT(nil)()
	a, b := column(tbl, "a"), column(tbl, "b")
	desc := schema.NewUniqueIndex("t_a_b_desc").AddColumns(a)
	desc.AddParts(&schema.IndexPart{C: b, Desc: true})
	desc.AddAttrs(&sqlite.IndexPredicate{P: "b IS NOT NULL"})
	expr := schema.NewIndex("t_lower_a").AddParts(&schema.IndexPart{X: &schema.RawExpr{X: "lower(a)"}})
	key := schema.NewUniqueIndex("t_a_key").AddColumns(a).AddAttrs(postgres.UniqueConstraint("t_a_key"))

	x := describe.Index(desc)
	require.Equal(t, describe.IndexDescription{Name: "t_a_b_desc", Unique: true, Parts: []string{"a", "b DESC"}, Columns: []string{"a", "b"}, Predicate: "b IS NOT NULL"}, x)
	require.Equal(t, "unique (a, b DESC) partial", x.Definition())
	require.Equal(t, "t_a_b_desc unique(a, b DESC)", x.String())
	require.Nil(t, describe.Index(expr).Columns, "an expression names no column")
	require.Equal(t, "index (lower(a))", describe.Index(expr).Definition())
	require.True(t, describe.Index(key).Constraint)
	require.False(t, describe.Index(tbl.Indexes[0]).Constraint)
	require.True(t, describe.SameIndex(key, schema.NewUniqueIndex("other_name").AddColumns(a)), "the same uniqueness under another name")
	require.False(t, describe.SameIndex(desc, schema.NewUniqueIndex("t_a_b").AddColumns(a, b)), "direction and predicate count")

	parent := schema.NewTable("p").AddColumns(schema.NewStringColumn("id", "text"))
	fk := schema.NewForeignKey("t_a_fk").AddColumns(a).SetRefTable(parent).AddRefColumns(column(parent, "id")).SetOnDelete(schema.Cascade)
	f := describe.ForeignKey(fk)
	require.Equal(t, "(a) REFERENCES p (id) ON DELETE CASCADE", f.Definition())
	require.Equal(t, "(a) p(id) NO ACTION CASCADE", f.Decides())
}

// A nullable key the declaration makes NOT NULL (the host's own
// `id TEXT PRIMARY KEY`, which SQLite lets hold NULL) is rebuilt, and the
// rebuild first refuses a row holding NULL there, naming it by rowid and the
// declared unique key.
func TestPlanTable_SQLiteNullableKeyIsRebuiltRefusingNulls(t *testing.T) {
	runPlanCases(t, sqliteDriver{}, []planTableCase{{name: "nullable id", live: sqliteT(func(t *schema.Table) {
		column(t, "id").Type.Null = true
	}), want: sqliteT(nil), check: func(t *testing.T, tp *tablePlan) {
		require.Equal(t, []string{"shape:rebuild"}, phaseNames(tp))
		ph := tp.Phases[0]
		require.Equal(t, []ops.GuardKind{ops.GuardNoNulls, ops.GuardRowsCopied, ops.GuardSetting}, guardKinds(ph), "the NULL check first, before anything changes")
		g := ph.Guards[0]
		require.Equal(t, "id", g.Column)
		require.Equal(t, []string{"rowid", "a", "b"}, g.Names)
		require.Equal(t, []string{`SELECT "rowid", "a", "b" FROM "t" WHERE "id" IS NULL LIMIT 1`}, g.SQL)
	}}})
}
