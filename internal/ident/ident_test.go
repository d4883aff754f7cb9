package ident_test

import (
	"fmt"
	"slices"
	"testing"

	"ariga.io/atlas/sql/schema"
	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/internal/ident"
	"github.com/schemastate/schemastate/internal/ops"
)

// AtlasNames walks every name each kind of change it knows could render,
// and refuses a kind it does not know, also inside a ModifyTable: a kind
// dropped from the walk, or a name skipped, fails here. The names are
// compared as a set: what is held is which names are checked (an unnamed
// key's empty name is not one: TestTableNames_UnnamedPrimaryKeyIsNotVisited).
func TestAtlasNames_WalksEveryNameOfEachKnownChange(t *testing.T) {
	c1, c2 := &schema.Column{Name: "c1"}, &schema.Column{Name: "c2"}
	i1 := &schema.Index{Name: "i1", Parts: []*schema.IndexPart{{C: c1}}, Attrs: []schema.Attr{&schema.Check{Name: "ck0"}}}
	i2 := &schema.Index{Name: "i2", Parts: []*schema.IndexPart{{C: c2}}}
	pk1, pk2 := &schema.Index{Name: "pk1", Parts: []*schema.IndexPart{{C: c1}}}, &schema.Index{Parts: []*schema.IndexPart{{C: c2}}}
	ref := &schema.Table{Name: "r", Schema: &schema.Schema{Name: "rs"}}
	fk1 := &schema.ForeignKey{Symbol: "fk1", Columns: []*schema.Column{c1}, RefColumns: []*schema.Column{c2}, RefTable: ref}
	fk2 := &schema.ForeignKey{Columns: []*schema.Column{c2}, RefColumns: []*schema.Column{c1}, RefTable: &schema.Table{Name: "r2"}}
	ck1, ck2 := &schema.Check{Name: "ck1"}, &schema.Check{}
	tbl := &schema.Table{Name: "t", Schema: &schema.Schema{Name: "s"}, Columns: []*schema.Column{c1},
		PrimaryKey: pk1, Indexes: []*schema.Index{i2}, ForeignKeys: []*schema.ForeignKey{fk1}, Attrs: []schema.Attr{ck1}}
	tableNames := []string{"table t", "schema s", "column c1", "primary key pk1", "column c1", "index i2", "column c2",
		"foreign key fk1", "column c1", "column c2", "table r", "schema rs", "check ck1"}

	for _, tc := range []struct {
		change schema.Change
		want   []string
	}{
		{&schema.AddTable{T: tbl}, tableNames},
		{&schema.DropTable{T: tbl}, []string{"table t"}},
		{&schema.ModifyTable{T: tbl, Changes: []schema.Change{&schema.AddColumn{C: c2}, &schema.DropIndex{I: i1}}},
			append(append([]string{}, tableNames...), "column c2", "index i1", "column c1", "check ck0")},
		{&schema.RenameTable{From: &schema.Table{Name: "a"}, To: &schema.Table{Name: "b"}}, []string{"table a", "table b"}},
		{&schema.AddColumn{C: c1}, []string{"column c1"}},
		{&schema.DropColumn{C: c2}, []string{"column c2"}},
		{&schema.ModifyColumn{From: c1, To: c2}, []string{"column c1", "column c2"}},
		{&schema.RenameColumn{From: c2, To: c1}, []string{"column c2", "column c1"}},
		{&schema.AddIndex{I: i1}, []string{"index i1", "column c1", "check ck0"}},
		{&schema.DropIndex{I: i2}, []string{"index i2", "column c2"}},
		{&schema.ModifyIndex{From: i1, To: i2}, []string{"index i1", "column c1", "check ck0", "index i2", "column c2"}},
		{&schema.RenameIndex{From: i2, To: i1}, []string{"index i2", "column c2", "index i1", "column c1", "check ck0"}},
		{&schema.AddPrimaryKey{P: pk1}, []string{"primary key pk1", "column c1"}},
		{&schema.DropPrimaryKey{P: pk2}, []string{"column c2"}},
		{&schema.ModifyPrimaryKey{From: pk1, To: pk2}, []string{"primary key pk1", "column c1", "column c2"}},
		{&schema.AddForeignKey{F: fk1}, []string{"foreign key fk1", "column c1", "column c2", "table r", "schema rs"}},
		{&schema.DropForeignKey{F: fk2}, []string{"column c2", "column c1", "table r2"}},
		{&schema.ModifyForeignKey{From: fk2, To: fk1}, []string{"column c2", "column c1", "table r2", "foreign key fk1", "column c1", "column c2", "table r", "schema rs"}},
		{&schema.AddCheck{C: ck1}, []string{"check ck1"}},
		{&schema.DropCheck{C: ck2}, nil},
		{&schema.ModifyCheck{From: ck2, To: ck1}, []string{"check ck1"}},
		{&schema.AddAttr{A: ck1}, []string{"check ck1"}},
		{&schema.DropAttr{A: &schema.Comment{Text: "not a name"}}, nil},
		{&schema.ModifyAttr{From: ck1, To: &schema.Check{Name: "ck3"}}, []string{"check ck1", "check ck3"}},
	} {
		t.Run(fmt.Sprintf("%T", tc.change), func(t *testing.T) {
			var got []string
			err := ident.AtlasNames(tc.change, func(kind, name string) error {
				if name != "" {
					got = append(got, kind+" "+name)
				}
				return nil
			})
			require.NoError(t, err)
			require.Equal(t, nameSet(tc.want), nameSet(got))
		})
	}

	t.Run("a refused name is the error", func(t *testing.T) {
		err := ident.AtlasNames(&schema.ModifyColumn{From: c1, To: &schema.Column{Name: `x"; DROP TABLE t; --`}}, ident.RequirePlain)
		require.ErrorIs(t, err, ops.ErrUnsafeName)
		require.ErrorContains(t, err, `column "x\"; DROP TABLE t; --"`)
	})
	for _, unknown := range []schema.Change{
		&schema.AddSchema{S: &schema.Schema{Name: "s"}},
		&schema.ModifyTable{T: tbl, Changes: []schema.Change{&schema.AddColumn{C: c2}, &schema.DropSchema{S: &schema.Schema{Name: "s"}}}},
		nil,
	} {
		t.Run(fmt.Sprintf("refuses %T", unknown), func(t *testing.T) {
			err := ident.AtlasNames(unknown, func(string, string) error { return nil })
			require.ErrorIs(t, err, ops.ErrUnsafeName)
			require.ErrorContains(t, err, "whose names are not checked")
		})
	}
}

// nameSet is names sorted, each once.
func nameSet(names []string) []string {
	set := slices.Clone(names)
	slices.Sort(set)
	return slices.Compact(set)
}

// A key without a name has no name to hold to the rules: the visitor is
// never called with its empty name. (It was, and the declaration's check
// then looked the empty name up in the HCL source, parsing the file once
// for every table: two thirds of evaluating schema.hcl.)
func TestTableNames_UnnamedPrimaryKeyIsNotVisited(t *testing.T) {
	id := &schema.Column{Name: "id"}
	tbl := &schema.Table{Name: "t", Columns: []*schema.Column{id}}
	tbl.PrimaryKey = &schema.Index{Table: tbl, Parts: []*schema.IndexPart{{C: id}}}
	var seen []string
	require.NoError(t, ident.TableNames(tbl, func(kind, name string) error {
		seen = append(seen, kind+" "+name)
		require.NotEmpty(t, name, "%s visited without a name", kind)
		return nil
	}))
	require.Equal(t, []string{"table t", "column id", "column id"}, seen)
}
