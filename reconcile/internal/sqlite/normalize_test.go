package sqlite

import (
	"reflect"
	"testing"

	"ariga.io/atlas/sql/schema"
	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/reconcile/internal/core"
)

// normalizedLive returns a new table and leaves the inspected one as the
// catalog holds it; it also made its change (so the check is not of a
// no-op): SQLite's autoindex takes the declared key's name, and a default
// SQLite keeps in parentheses is the declared one.
func TestNormalizedLive_LeavesTheInspectedTableAsRead(t *testing.T) {
	text := func(name string, null bool) *schema.Column {
		return &schema.Column{Name: name, Type: &schema.ColumnType{Type: &schema.StringType{T: "text"}, Raw: "text", Null: null}}
	}
	inspected := func() *schema.Table {
		id, parent, a, b := text("id", false), text("parent_id", true), text("a", true), text("b", true)
		b.Default = &schema.RawExpr{X: "(lower(hex(randomblob(16))))"}
		tbl := schema.NewTable("t").AddColumns(id, parent, a, b).SetPrimaryKey(schema.NewPrimaryKey(id))
		tbl.AddIndexes(schema.NewUniqueIndex("sqlite_autoindex_t_1").AddColumns(parent, a))
		schema.New("main").AddTables(tbl)
		return tbl
	}
	declared := func() *schema.Table {
		id, parent, a, b := text("id", false), text("parent_id", true), text("a", true), text("b", true)
		b.Default = &schema.RawExpr{X: "lower(hex(randomblob(16)))"}
		tbl := schema.NewTable("t").AddColumns(id, parent, a, b).SetPrimaryKey(schema.NewPrimaryKey(id))
		tbl.AddIndexes(schema.NewUniqueIndex("t_parent_a_key").AddColumns(parent, a))
		return tbl
	}
	live, want := inspected(), declared()
	before := core.CloneTable(live)
	out := normalizedLive(live, want)
	require.NotSame(t, live, out)
	_, ok := out.Index("t_parent_a_key")
	require.True(t, ok, "the autoindex takes the declared key's name")
	b, _ := out.Column("b")
	wb, _ := want.Column("b")
	require.Same(t, wb.Default, b.Default)
	require.False(t, reflect.DeepEqual(before, out), "the normalization changed nothing")
	require.True(t, reflect.DeepEqual(before, live), "the inspected table was changed")
	require.True(t, reflect.DeepEqual(declared(), want), "the declaration was changed")
}
