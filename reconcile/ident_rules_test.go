package reconcile

import (
	"testing"

	"ariga.io/atlas/sql/postgres"
	"ariga.io/atlas/sql/schema"
	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/reconcile/internal/core"
)

// render with no database: the drops of names that are not plain are the
// module's, quoted; every other name that is not plain, and a kind of
// change the name check does not know, is refused before Atlas renders.
func TestRender_NamesThatAreNotPlain(t *testing.T) {
	const hostile = `x";DROP TABLE kandev_meta;--`
	table := func(schemaName string) *schema.Table {
		s := schema.New(schemaName)
		tbl := schema.NewTable("t").AddColumns(schema.NewStringColumn("a", "text"))
		s.AddTables(tbl)
		return tbl
	}
	cases := []struct {
		name    string
		d       dialect.Dialect
		changes func(t *schema.Table) []schema.Change
		want    []string
		refused string
	}{
		{name: "postgres index", d: dialect.Postgres,
			changes: func(t *schema.Table) []schema.Change {
				return []schema.Change{&schema.DropIndex{I: schema.NewIndex(hostile).AddColumns(t.Columns[0])}}
			},
			want: []string{`DROP INDEX "public"."x"";DROP TABLE kandev_meta;--"`}},
		{name: "postgres unique constraint", d: dialect.Postgres,
			changes: func(t *schema.Table) []schema.Change {
				idx := schema.NewUniqueIndex(hostile).AddColumns(t.Columns[0]).AddAttrs(postgres.UniqueConstraint(hostile))
				return []schema.Change{&schema.DropIndex{I: idx}}
			},
			want: []string{`ALTER TABLE "public"."t" DROP CONSTRAINT "x"";DROP TABLE kandev_meta;--"`}},
		{name: "postgres foreign key and check, before Atlas's own statement", d: dialect.Postgres,
			changes: func(t *schema.Table) []schema.Change {
				fk := schema.NewForeignKey(hostile).AddColumns(t.Columns[0]).SetRefTable(t).AddRefColumns(t.Columns[0])
				return []schema.Change{
					&schema.AddColumn{C: schema.NewNullStringColumn("b", "text")},
					&schema.DropForeignKey{F: fk},
					&schema.DropCheck{C: &schema.Check{Name: hostile, Expr: "a <> ''"}},
				}
			},
			want: []string{
				`ALTER TABLE "public"."t" DROP CONSTRAINT "x"";DROP TABLE kandev_meta;--"`,
				`ALTER TABLE "public"."t" DROP CONSTRAINT "x"";DROP TABLE kandev_meta;--"`,
				`ALTER TABLE "public"."t" ADD COLUMN "b" text NULL`,
			}},
		{name: "sqlite index", d: dialect.SQLite,
			changes: func(t *schema.Table) []schema.Change {
				return []schema.Change{&schema.DropIndex{I: schema.NewIndex(hostile).AddColumns(t.Columns[0])}}
			},
			want: []string{`DROP INDEX "x"";DROP TABLE kandev_meta;--"`}},
		{name: "sqlite foreign key (only a rebuild drops one)", d: dialect.SQLite,
			changes: func(t *schema.Table) []schema.Change {
				return []schema.Change{&schema.DropForeignKey{F: schema.NewForeignKey(hostile).AddColumns(t.Columns[0]).SetRefTable(t)}}
			},
			refused: "only by rebuilding"},
		{name: "a referenced table", d: dialect.Postgres,
			changes: func(t *schema.Table) []schema.Change {
				other := schema.NewTable(hostile).SetSchema(t.Schema)
				fk := schema.NewForeignKey("fk").AddColumns(t.Columns[0]).SetRefTable(other).AddRefColumns(schema.NewStringColumn("id", "text"))
				return []schema.Change{&schema.AddForeignKey{F: fk}}
			},
			refused: `table "x\";DROP TABLE kandev_meta;--"`},
		{name: "an added column", d: dialect.SQLite,
			changes: func(*schema.Table) []schema.Change {
				return []schema.Change{&schema.AddColumn{C: schema.NewNullStringColumn("b`;DROP TABLE kandev_meta;--", "text")}}
			},
			refused: "column \"b`;DROP TABLE kandev_meta;--\""},
		{name: "a change whose names are not checked", d: dialect.Postgres,
			changes: func(*schema.Table) []schema.Change {
				return []schema.Change{&schema.AddView{V: schema.NewView("v", "SELECT 1")}}
			},
			refused: "*schema.AddView"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			schemaName := map[dialect.Dialect]string{dialect.Postgres: "public", dialect.SQLite: "main"}[c.d]
			tbl := table(schemaName)
			pc := &core.PlanContext{Atlas: atlasFor(c.d), Schema: schemaName, Driver: driverOf(c.d)}
			stmts, err := pc.Render(&schema.ModifyTable{T: tbl, Changes: c.changes(tbl)})
			if c.refused != "" {
				require.ErrorContains(t, err, c.refused)
				require.Nil(t, stmts)
				return
			}
			require.NoError(t, err)
			require.Equal(t, c.want, stmts)
		})
	}
}
