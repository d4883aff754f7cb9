package postgres

import (
	"reflect"
	"testing"

	atlaspg "ariga.io/atlas/sql/postgres"
	"ariga.io/atlas/sql/schema"
	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/reconcile/internal/core"
)

// inspectedTable is a live table as an inspection returns it, carrying
// every artefact a planner's normalization takes out or renames: a shadow
// column and an INVALID index of an online upgrade, a column being filled,
// a NOT NULL check, a NOT VALID check and foreign key, a deferrable key, an
// auto-named key, SQLite's autoindex and a default SQLite keeps in
// parentheses, and a self-referencing foreign key.
func inspectedTable() *schema.Table {
	text := func() *schema.ColumnType {
		return &schema.ColumnType{Type: &schema.StringType{T: "text"}, Raw: "text", Null: true}
	}
	id := schema.NewColumn("id").SetType(&schema.StringType{T: "text"})
	parent := &schema.Column{Name: "parent_id", Type: text()}
	a := &schema.Column{Name: "a", Type: text()}
	b := &schema.Column{Name: "b", Type: text(), Default: &schema.RawExpr{X: "(lower(hex(randomblob(16))))"}}
	fill := &schema.Column{Name: "filled", Type: text(), Attrs: []schema.Attr{&schema.Comment{Text: fillMarker}}}
	shadow := &schema.Column{Name: "n" + shadowSuffix, Type: text()}
	t := schema.NewTable("t").AddColumns(id, parent, a, b, fill, shadow)
	t.SetSchema(schema.New("public"))
	t.SetPrimaryKey(schema.NewPrimaryKey(id))
	unique := func(name string, cols ...*schema.Column) *schema.Index {
		idx := schema.NewUniqueIndex(name).AddColumns(cols...)
		idx.Attrs = []schema.Attr{&atlaspg.Constraint{T: "u"}}
		return idx
	}
	t.AddIndexes(
		unique("t_a_b_key", a, b),                     // equivalent to the declared t_ab_key
		unique("t_deferred_key", a),                   // declared, live DEFERRABLE
		schema.NewIndex("t_broken_idx").AddColumns(b), // INVALID
		schema.NewUniqueIndex("sqlite_autoindex_t_1").AddColumns(parent, a),
	)
	self := schema.NewForeignKey("t_parent_fkey").AddColumns(parent)
	self.SetRefTable(t).AddRefColumns(id)
	checked := schema.NewForeignKey("t_checked_fkey").AddColumns(a)
	checked.SetRefTable(schema.NewTable("other").AddColumns(schema.NewColumn("id")))
	t.AddForeignKeys(self, checked)
	t.AddChecks(&schema.Check{Name: notNullCheckPrefix + "filled", Expr: "filled IS NOT NULL"},
		&schema.Check{Name: "t_a_check", Expr: "a <> ''"})
	return t
}

// declaredTable is the declaration inspectedTable is planned against.
func declaredTable() *schema.Table {
	id := schema.NewColumn("id").SetType(&schema.StringType{T: "text"})
	parent := schema.NewNullColumn("parent_id").SetType(&schema.StringType{T: "text"})
	a := schema.NewNullColumn("a").SetType(&schema.StringType{T: "text"})
	b := schema.NewNullColumn("b").SetType(&schema.StringType{T: "text"}).SetDefault(&schema.RawExpr{X: "lower(hex(randomblob(16)))"})
	fill := schema.NewColumn("filled").SetType(&schema.StringType{T: "text"}).SetDefault(&schema.RawExpr{X: "gen_random_uuid()::text"})
	t := schema.NewTable("t").AddColumns(id, parent, a, b, fill)
	t.SetPrimaryKey(schema.NewPrimaryKey(id))
	t.AddIndexes(schema.NewUniqueIndex("t_ab_key").AddColumns(a, b), schema.NewUniqueIndex("t_deferred_key").AddColumns(a),
		schema.NewIndex("t_broken_idx").AddColumns(b), schema.NewUniqueIndex("t_parent_a_key").AddColumns(parent, a))
	checked := schema.NewForeignKey("t_checked_fkey").AddColumns(a)
	checked.SetRefTable(schema.NewTable("other").AddColumns(schema.NewColumn("id")))
	t.AddForeignKeys(checked)
	t.AddChecks(&schema.Check{Name: "t_a_check", Expr: "a <> ''"})
	return t
}

// A copy is equal to its source, wired to itself (an index part names the
// copy's column, a self-reference the copy), and changing it changes
// nothing of the source.
func TestCloneTable_IsEqualAndIndependent(t *testing.T) {
	src := inspectedTable()
	before := core.CloneTable(src)
	require.True(t, reflect.DeepEqual(src, before), "a copy is equal to its source")

	c := core.CloneTable(src)
	for _, idx := range c.Indexes {
		require.Same(t, c, idx.Table)
		for _, p := range idx.Parts {
			col, ok := c.Column(p.C.Name)
			require.True(t, ok)
			require.Same(t, col, p.C, "index %s names the copy's column", idx.Name)
		}
	}
	require.Same(t, c, c.ForeignKeys[0].RefTable, "a self-reference is the copy")
	require.Same(t, src.ForeignKeys[1].RefTable, c.ForeignKeys[1].RefTable, "another table is shared")

	c.Columns[1].Name, c.Columns[1].Type.Null = "renamed", false
	c.Columns[2].Attrs = append(c.Columns[2].Attrs, &schema.Comment{Text: "x"})
	c.Indexes[0].Name, c.Indexes[0].Parts[0].Desc = "renamed", true
	c.Indexes = c.Indexes[1:]
	c.PrimaryKey.Name = "renamed"
	c.ForeignKeys[0].Symbol = "renamed"
	c.Attrs = c.Attrs[:1]
	require.True(t, reflect.DeepEqual(src, before), "changing the copy changed its source")
}

// Every normalization a planner makes of an inspected table returns a new
// table and leaves the inspected one as the catalog holds it; each one also
// made its change (so the check is not of a no-op).
func TestPlanners_LeaveTheInspectedTableAsRead(t *testing.T) {
	want := declaredTable()
	facts := tableFacts{
		deferrable:  map[string]bool{"t_deferred_key": true},
		invalid:     []string{"t_broken_idx"},
		notValid:    map[string]bool{"t_a_check": true, "t_checked_fkey": true},
		sameDefault: map[string]bool{"filled": true},
	}
	indexNames := func(t *schema.Table) (names []string) {
		for _, idx := range t.Indexes {
			names = append(names, idx.Name)
		}
		return names
	}
	for name, normalize := range map[string]func(*testing.T, *schema.Table) *schema.Table{
		"resumeOnline": func(t *testing.T, live *schema.Table) *schema.Table {
			out, in := resumeOnline(live, want, facts.invalid)
			require.True(t, in.shadows)
			require.NotContains(t, indexNames(out), "t_broken_idx")
			return out
		},
		"normalizeRecipes": func(t *testing.T, live *schema.Table) *schema.Table {
			out, nn, filling := normalizeRecipes(live, want, facts)
			require.Equal(t, map[string]string{notNullCheckPrefix + "filled": "filled"}, nn)
			require.Len(t, filling, 1)
			require.Len(t, out.ForeignKeys, 1, "the NOT VALID foreign key is taken out")
			return out
		},
		"replaceDeferrableKeys": func(t *testing.T, live *schema.Table) *schema.Table {
			out, stmts := replaceDeferrableKeys("public", live, want, facts.deferrable)
			require.Len(t, stmts, 1)
			require.NotContains(t, indexNames(out), "t_deferred_key")
			return out
		},
		"renameEquivalentUniques": func(t *testing.T, live *schema.Table) *schema.Table {
			out, stmts, renamed := renameEquivalentUniques("public", live, want, nil)
			require.Len(t, stmts, 1)
			require.Equal(t, map[string]string{"t_a_b_key": "t_ab_key"}, renamed)
			require.Contains(t, indexNames(out), "t_ab_key")
			return out
		},
	} {
		t.Run(name, func(t *testing.T) {
			live := inspectedTable()
			before := core.CloneTable(live)
			out := normalize(t, live)
			require.NotSame(t, live, out)
			require.False(t, reflect.DeepEqual(before, out), "the normalization changed nothing")
			require.True(t, reflect.DeepEqual(before, live), "the inspected table was changed")
			require.True(t, reflect.DeepEqual(declaredTable(), want), "the declaration was changed")
		})
	}
}
