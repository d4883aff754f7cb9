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
	c := &cloner{src: t, cols: map[*schema.Column]*schema.Column{}, idxs: map[*schema.Index]*schema.Index{}, fks: map[*schema.ForeignKey]*schema.ForeignKey{}}
	c.dst = &schema.Table{Name: t.Name, Schema: t.Schema, Attrs: slices.Clone(t.Attrs),
		Triggers: slices.Clone(t.Triggers), Deps: slices.Clone(t.Deps), Refs: slices.Clone(t.Refs)}
	c.columns()
	for _, idx := range t.Indexes {
		c.dst.Indexes = append(c.dst.Indexes, c.index(idx))
	}
	c.dst.PrimaryKey = c.index(t.PrimaryKey)
	c.foreignKeys()
	c.wireColumns()
	return c.dst
}

// cloner is one CloneTable: the copy of src being made (dst) and, by each
// of src's columns, indexes and foreign keys, its copy.
type cloner struct {
	src, dst *schema.Table
	cols     map[*schema.Column]*schema.Column
	idxs     map[*schema.Index]*schema.Index
	fks      map[*schema.ForeignKey]*schema.ForeignKey
}

// columns copies src's columns, their types and attributes; their indexes
// and foreign keys are wired once those are copied (wireColumns).
func (c *cloner) columns() {
	for _, col := range c.src.Columns {
		cc := *col
		cc.Attrs = slices.Clone(col.Attrs)
		if col.Type != nil {
			ct := *col.Type
			cc.Type = &ct
		}
		cc.Indexes, cc.ForeignKeys = nil, nil
		c.cols[col] = &cc
		c.dst.Columns = append(c.dst.Columns, &cc)
	}
}

// column is col's copy, or col itself when it is not src's.
func (c *cloner) column(col *schema.Column) *schema.Column {
	if cc, ok := c.cols[col]; ok {
		return cc
	}
	return col
}

// index is idx's copy, made once, its parts naming the copied columns.
func (c *cloner) index(idx *schema.Index) *schema.Index {
	if idx == nil {
		return nil
	}
	if ci, ok := c.idxs[idx]; ok {
		return ci
	}
	ci := &schema.Index{Name: idx.Name, Unique: idx.Unique, Table: c.dst, View: idx.View, Attrs: slices.Clone(idx.Attrs)}
	for _, p := range idx.Parts {
		cp := *p
		cp.Attrs, cp.C = slices.Clone(p.Attrs), c.column(p.C)
		ci.Parts = append(ci.Parts, &cp)
	}
	c.idxs[idx] = ci
	return ci
}

// foreignKeys copies src's foreign keys: their columns the copied ones, a
// self-reference the copy, another table shared.
func (c *cloner) foreignKeys() {
	t := c.src
	for _, fk := range t.ForeignKeys {
		cf := *fk
		cf.Table, cf.Attrs, cf.Columns, cf.RefColumns = c.dst, slices.Clone(fk.Attrs), nil, nil
		for _, col := range fk.Columns {
			cf.Columns = append(cf.Columns, c.column(col))
		}
		if fk.RefTable == t {
			cf.RefTable = c.dst
		}
		for _, col := range fk.RefColumns {
			if fk.RefTable == t {
				col = c.column(col)
			}
			cf.RefColumns = append(cf.RefColumns, col)
		}
		c.fks[fk] = &cf
		c.dst.ForeignKeys = append(c.dst.ForeignKeys, &cf)
	}
}

// wireColumns gives each copied column the copies of its indexes and
// foreign keys (a foreign key not src's stays as it is).
func (c *cloner) wireColumns() {
	for _, col := range c.src.Columns {
		cc := c.cols[col]
		for _, idx := range col.Indexes {
			cc.Indexes = append(cc.Indexes, c.index(idx))
		}
		for _, fk := range col.ForeignKeys {
			if cf, ok := c.fks[fk]; ok {
				cc.ForeignKeys = append(cc.ForeignKeys, cf)
			} else {
				cc.ForeignKeys = append(cc.ForeignKeys, fk)
			}
		}
	}
}
