package reconcile

import (
	"testing"

	"ariga.io/atlas/sql/migrate"
	"ariga.io/atlas/sql/postgres"
	"ariga.io/atlas/sql/schema"
	"ariga.io/atlas/sql/sqlite"
	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/describe"
	"github.com/schemastate/schemastate/reconcile/internal/core"
	"github.com/schemastate/schemastate/reconcile/internal/coretest"
)

// Rules of both dialects' planning, with no database: Atlas's diff and
// rendering are its DefaultDiff and DefaultPlan. Each dialect's own
// planning rules are tested in its package (reconcile/internal/sqlite and
// reconcile/internal/postgres, plan_test.go).

// differPlanner is Atlas's database-free diff and rendering for a dialect.
type differPlanner struct {
	schema.Differ
	migrate.PlanApplier
}

func atlasFor(d dialect.Dialect) core.AtlasPlanner {
	if d == dialect.Postgres {
		return differPlanner{postgres.DefaultDiff, postgres.DefaultPlan}
	}
	return differPlanner{sqlite.DefaultDiff, sqlite.DefaultPlan}
}

// driverOf is the dialect's driver.
func driverOf(d dialect.Dialect) core.Driver {
	drv, err := driverFor(d)
	if err != nil {
		panic(err)
	}
	return drv
}

// One describer of indexes and foreign keys: the forms drift reports (and a
// certificate stores), IndexSet lists and comparisons read.
func TestDescribe_IndexAndForeignKeyForms(t *testing.T) {
	tbl := coretest.SQLiteTable(nil)()
	a, b := coretest.Column(tbl, "a"), coretest.Column(tbl, "b")
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
	fk := schema.NewForeignKey("t_a_fk").AddColumns(a).SetRefTable(parent).AddRefColumns(coretest.Column(parent, "id")).SetOnDelete(schema.Cascade)
	f := describe.ForeignKey(fk)
	require.Equal(t, "(a) REFERENCES p (id) ON DELETE CASCADE", f.Definition())
	require.Equal(t, "(a) p(id) NO ACTION CASCADE", f.Decides())
}
