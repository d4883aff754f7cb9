package reconcile

import (
	"context"
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
