package core

import (
	"context"
	"fmt"

	"ariga.io/atlas/sql/schema"

	"github.com/schemastate/schemastate/internal/describe"
)

// Atlas's inspection reads no index part's collation, and a declaration
// names none: a declared index's parts sort and compare by their columns'
// collations. An index under a declared name whose part has another (built
// by hand, say `(task_id COLLATE "C")` or `COLLATE NOCASE`, or a
// nondeterministic collation that makes a unique key merge what the
// declared one keeps apart) was the declared index to the diff. Each driver
// reads the collations off its catalog (Collations) and the planner and the
// end state mark the inspected parts with them (describe.Collation), so such
// an index is spelled, compared and replaced as the other definition it is
// (CollationTwins).

// Collations maps each index of a table with a key part whose collation is
// not the declared one (PostgreSQL: the column's; SQLite: BINARY) to those
// parts (by position, from 1) and the collation's name as the catalog
// spells it.
type Collations map[string]map[int]string

// ReadCollations runs query, a driver's read of table's index parts of
// another collation than the declared one, which returns each as the index's
// name, the part's position (from 1) and the collation's name.
func ReadCollations(ctx context.Context, q Querier, query, table string) (Collations, error) {
	rows, err := q.QueryContext(ctx, query, table)
	if err != nil {
		return nil, fmt.Errorf("read the index collations of %s: %w", table, err)
	}
	defer rows.Close()
	cs := Collations{}
	for rows.Next() {
		var index, name string
		var part int
		if err := rows.Scan(&index, &part, &name); err != nil {
			return nil, fmt.Errorf("read the index collations of %s: %w", table, err)
		}
		if cs[index] == nil {
			cs[index] = map[int]string{}
		}
		cs[index][part] = name
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the index collations of %s: %w", table, err)
	}
	return cs, nil
}

// MarkCollations is live with its index parts of another collation than
// their column's marked, as query reads them (ReadCollations): live itself
// when it is nil or none is found, else a copy.
func MarkCollations(ctx context.Context, q Querier, query string, live *schema.Table) (*schema.Table, error) {
	if live == nil {
		return nil, nil
	}
	cs, err := ReadCollations(ctx, q, query, live.Name)
	return cs.Mark(live), err
}

// Mark is live with each part cs names marked with its collation: live
// itself when none is named, else a copy.
func (cs Collations) Mark(live *schema.Table) *schema.Table {
	if live == nil || len(cs) == 0 {
		return live
	}
	t := CloneTable(live)
	for _, idx := range append(t.Indexes[:len(t.Indexes):len(t.Indexes)], t.PrimaryKey) {
		if idx == nil {
			continue
		}
		for k, p := range idx.Parts {
			if name, ok := cs[idx.Name][k+1]; ok {
				p.Attrs = append(p.Attrs, &describe.Collation{Name: name})
			}
		}
	}
	return t
}

// CollationTwins are the diff's changes Atlas misses on a declared index:
// one live under its name with a part of another collation (marked).
func CollationTwins(live, want *schema.Table, changes []schema.Change) []schema.Change {
	for _, w := range want.Indexes {
		l, ok := live.Index(w.Name)
		if !ok || !describe.HasCollation(l) || HasChange(changes, ObjectIndex, w.Name) {
			continue
		}
		changes = append(changes, &schema.ModifyIndex{From: l, To: w, Change: schema.ChangeParts})
	}
	return changes
}
