package core

import (
	"fmt"
	"slices"

	"ariga.io/atlas/sql/schema"

	"github.com/schemastate/schemastate/internal/describe"
)

// Drift policy. An owned table may carry indexes, foreign keys and checks
// that schema.hcl does not declare: an operator's index on model, a host's
// own constraint. A declarative diff plans dropping them; at boot that would
// take away what the host relies on (and, for an index, a query plan) without
// anyone asking. So the shape step never drops them: they are drift, kept,
// reported — a WARN naming each at every boot, Plan's and Observe's Drift —
// and a SQLite rebuild creates them again on the rebuilt table. They are
// dropped only on request (WithPrune, `reconcile --prune`).
//
// One thing that is not declared is still replaced: a unique index whose
// columns all belong to a declared unique key is an older or reordered
// spelling of that key (the pre-amendment UNIQUE(task_session_id,
// tool_call_id) is one). It rejects rows the declared key admits, so it is
// the migration's to remove (AC-33 clause 3), not the operator's to keep.

// Drift kinds.
const (
	DriftIndex      = "index"
	DriftForeignKey = "foreign_key"
	DriftCheck      = "check"
)

// Drift is one index, foreign key or check on an owned table that the
// declaration does not declare.
type Drift struct {
	Table string `json:"table"`
	// Kind is "index", "foreign_key" or "check".
	Kind string `json:"kind"`
	// Name is the object's name; SQLite numbers an unnamed foreign key and
	// leaves an unnamed check without one.
	Name string `json:"name"`
	// Definition is the object as the inspector read it, e.g. "index (model)".
	Definition string `json:"definition"`
}

func (d Drift) String() string {
	name := d.Name
	if name == "" {
		name = "(unnamed)"
	}
	return fmt.Sprintf("%s.%s %s %s", d.Table, name, d.Kind, d.Definition)
}

// SplitDrift separates, from one table's diff, the changes that would drop
// an undeclared index, foreign key or check. Unless prune is set they are
// removed from the changes; either way they are returned as drift, with the
// schema objects a rebuild needs to create them again.
func SplitDrift(table string, changes []schema.Change, want *schema.Table, prune bool) (rest []schema.Change, drift []Drift, kept []schema.Change) {
	for _, c := range changes {
		var d Drift
		switch c := c.(type) {
		case *schema.DropIndex:
			if retiredKey(c.I, want) {
				rest = append(rest, c)
				continue
			}
			d = Drift{Kind: DriftIndex, Name: c.I.Name, Definition: describe.Index(c.I).Definition()}
		case *schema.DropForeignKey:
			d = Drift{Kind: DriftForeignKey, Name: c.F.Symbol, Definition: describe.ForeignKey(c.F).Definition()}
		case *schema.DropCheck:
			d = Drift{Kind: DriftCheck, Name: c.C.Name, Definition: "CHECK (" + c.C.Expr + ")"}
		default:
			rest = append(rest, c)
			continue
		}
		d.Table = table
		drift = append(drift, d)
		if prune {
			rest = append(rest, c)
		} else {
			kept = append(kept, c)
		}
	}
	return rest, drift, kept
}

// retiredKey reports a unique index whose columns all belong to one declared
// unique key: a spelling of that key the declaration replaces.
func retiredKey(idx *schema.Index, want *schema.Table) bool {
	cols := describe.ColumnNames(idx)
	if !idx.Unique || len(cols) == 0 {
		return false
	}
	for _, w := range want.Indexes {
		if !w.Unique {
			continue
		}
		declared := describe.ColumnNames(w)
		all := true
		for _, c := range cols {
			if !slices.Contains(declared, c) {
				all = false
				break
			}
		}
		if all {
			return true
		}
	}
	return false
}
