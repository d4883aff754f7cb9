package describe

import (
	"testing"

	"ariga.io/atlas/sql/postgres"
	"ariga.io/atlas/sql/schema"
	"github.com/stretchr/testify/require"
)

func part(c *schema.Column, desc bool, attrs ...schema.Attr) *schema.IndexPart {
	return &schema.IndexPart{C: c, Desc: desc, Attrs: attrs}
}

// An index is the same as another only with the same definition: an
// INCLUDE list, NULLS NOT DISTINCT, an operator class or a NULLs placement
// other than the direction's default make another index; the placement
// Atlas reads on every btree part where it is the default does not.
func TestSameIndex_ComparesTheWholeDefinition(t *testing.T) {
	a, b, c := schema.NewColumn("a"), schema.NewColumn("b"), schema.NewColumn("c")
	declared := &schema.Index{Name: "i", Parts: []*schema.IndexPart{part(a, false), part(b, true)}}
	inspected := &schema.Index{Name: "i", Parts: []*schema.IndexPart{
		part(a, false, &postgres.IndexColumnProperty{NullsLast: true}),
		part(b, true, &postgres.IndexColumnProperty{NullsFirst: true}),
	}}
	require.True(t, SameIndex(declared, inspected), "default NULLs placements, read or not")

	others := map[string]*schema.Index{
		"include":            {Name: "i", Parts: declared.Parts, Attrs: []schema.Attr{&postgres.IndexInclude{Columns: []*schema.Column{c}}}},
		"nulls not distinct": {Name: "i", Parts: declared.Parts, Attrs: []schema.Attr{&postgres.IndexNullsDistinct{V: false}}},
		"operator class":     {Name: "i", Parts: []*schema.IndexPart{part(a, false, &postgres.IndexOpClass{Name: "text_pattern_ops"}), part(b, true)}},
		"nulls first":        {Name: "i", Parts: []*schema.IndexPart{part(a, false, &postgres.IndexColumnProperty{NullsFirst: true}), part(b, true)}},
		"desc nulls last":    {Name: "i", Parts: []*schema.IndexPart{part(a, false), part(b, true, &postgres.IndexColumnProperty{NullsLast: true})}},
	}
	for name, other := range others {
		require.False(t, SameIndex(declared, other), name)
		require.True(t, SameIndex(other, other), name)
	}
	require.True(t, SameIndex(declared, &schema.Index{Name: "i", Parts: declared.Parts, Attrs: []schema.Attr{&postgres.IndexNullsDistinct{V: true}}}),
		"NULLS DISTINCT is the default")
	require.True(t, SameIndex(declared, &schema.Index{Name: "i", Parts: []*schema.IndexPart{part(a, false, &postgres.IndexOpClass{Name: "text_ops", Default: true}), part(b, true)}}),
		"a default operator class is none")

	x := Index(others["include"])
	require.Equal(t, "i index(a, b DESC) include(c)", x.String())
	require.Equal(t, "i index(a text_pattern_ops, b DESC)", Index(others["operator class"]).String())
	require.Equal(t, "i index(a NULLS FIRST, b DESC)", Index(others["nulls first"]).String())
	require.Equal(t, "index (a, b DESC NULLS LAST)", Index(others["desc nulls last"]).Definition())
	require.Equal(t, "index (a, b DESC) nulls not distinct", Index(others["nulls not distinct"]).Definition())
}
