package core

import (
	"slices"

	"ariga.io/atlas/sql/schema"
)

// CloneTable is a copy of t that can be changed without changing t: its
// columns, column types, indexes and their parts, primary key and foreign
// keys are new values, wired to each other as t's are (an index part names
// the copy's column, a self-referencing foreign key the copy). What the
// planners never change is shared: the schema t belongs to, other tables a
// foreign key references, and each attribute value (the slices holding them
// are new, so an attribute can be added or removed).
//
// The planners normalize an inspected table before diffing it (an online
// recipe in flight, a deferrable key, an equivalent key under another name,
// SQLite's spellings of the same shape); each does so on a copy and returns
// it, so the table as inspected stays as the catalog holds it.
func CloneTable(t *schema.Table) *schema.Table {
	if t == nil {
		return nil
	}
	c := &schema.Table{Name: t.Name, Schema: t.Schema, Attrs: slices.Clone(t.Attrs),
		Triggers: slices.Clone(t.Triggers), Deps: slices.Clone(t.Deps), Refs: slices.Clone(t.Refs)}
	cols := make(map[*schema.Column]*schema.Column, len(t.Columns))
	for _, col := range t.Columns {
		cc := *col
		cc.Attrs = slices.Clone(col.Attrs)
		if col.Type != nil {
			ct := *col.Type
			cc.Type = &ct
		}
		cc.Indexes, cc.ForeignKeys = nil, nil
		cols[col] = &cc
		c.Columns = append(c.Columns, &cc)
	}
	column := func(col *schema.Column) *schema.Column {
		if cc, ok := cols[col]; ok {
			return cc
		}
		return col
	}
	idxs := map[*schema.Index]*schema.Index{}
	index := func(idx *schema.Index) *schema.Index {
		if idx == nil {
			return nil
		}
		if ci, ok := idxs[idx]; ok {
			return ci
		}
		ci := &schema.Index{Name: idx.Name, Unique: idx.Unique, Table: c, View: idx.View, Attrs: slices.Clone(idx.Attrs)}
		for _, p := range idx.Parts {
			cp := *p
			cp.Attrs, cp.C = slices.Clone(p.Attrs), column(p.C)
			ci.Parts = append(ci.Parts, &cp)
		}
		idxs[idx] = ci
		return ci
	}
	for _, idx := range t.Indexes {
		c.Indexes = append(c.Indexes, index(idx))
	}
	c.PrimaryKey = index(t.PrimaryKey)
	fks := map[*schema.ForeignKey]*schema.ForeignKey{}
	for _, fk := range t.ForeignKeys {
		cf := *fk
		cf.Table, cf.Attrs, cf.Columns, cf.RefColumns = c, slices.Clone(fk.Attrs), nil, nil
		for _, col := range fk.Columns {
			cf.Columns = append(cf.Columns, column(col))
		}
		if fk.RefTable == t {
			cf.RefTable = c
		}
		for _, col := range fk.RefColumns {
			if fk.RefTable == t {
				col = column(col)
			}
			cf.RefColumns = append(cf.RefColumns, col)
		}
		fks[fk] = &cf
		c.ForeignKeys = append(c.ForeignKeys, &cf)
	}
	for _, col := range t.Columns {
		cc := cols[col]
		for _, idx := range col.Indexes {
			cc.Indexes = append(cc.Indexes, index(idx))
		}
		for _, fk := range col.ForeignKeys {
			if cf, ok := fks[fk]; ok {
				cc.ForeignKeys = append(cc.ForeignKeys, cf)
			} else {
				cc.ForeignKeys = append(cc.ForeignKeys, fk)
			}
		}
	}
	return c
}
