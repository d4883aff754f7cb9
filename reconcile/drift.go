package reconcile

import (
	"fmt"
	"strings"

	"ariga.io/atlas/sql/schema"
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
	Kind  string `json:"kind"`
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

// WithPrune makes the shape step drop the drift it finds instead of keeping
// it: `reconcile --prune`. Never the default.
func WithPrune() Option { return func(o *options) { o.prune = true } }

// splitDrift separates, from one table's diff, the changes that would drop
// an undeclared index, foreign key or check. Unless prune is set they are
// removed from the changes; either way they are returned as drift, with the
// schema objects a rebuild needs to create them again.
func splitDrift(table string, changes []schema.Change, want *schema.Table, prune bool) (rest []schema.Change, drift []Drift, kept []schema.Change) {
	for _, c := range changes {
		var d Drift
		switch c := c.(type) {
		case *schema.DropIndex:
			if retiredKey(c.I, want) {
				rest = append(rest, c)
				continue
			}
			d = Drift{Kind: DriftIndex, Name: c.I.Name, Definition: indexDefinition(c.I)}
		case *schema.DropForeignKey:
			d = Drift{Kind: DriftForeignKey, Name: c.F.Symbol, Definition: foreignKeyDefinition(c.F)}
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
	cols := columnNames(idx)
	if !idx.Unique || len(cols) == 0 {
		return false
	}
	for _, w := range want.Indexes {
		if !w.Unique {
			continue
		}
		declared := columnNames(w)
		all := true
		for _, c := range cols {
			if !contains(declared, c) {
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

func indexDefinition(idx *schema.Index) string {
	kind := "index"
	if idx.Unique {
		kind = "unique"
	}
	def := fmt.Sprintf("%s (%s)", kind, strings.Join(partNames(idx), ", "))
	if partial(idx) {
		def += " partial"
	}
	return def
}

// partNames spells each part of idx: a column's name, an expression's text,
// then DESC where the part is descending.
func partNames(idx *schema.Index) []string {
	var cols []string
	for _, p := range idx.Parts {
		c := "?"
		switch {
		case p.C != nil:
			c = p.C.Name
		case p.X != nil:
			if x, ok := p.X.(*schema.RawExpr); ok {
				c = x.X
			}
		}
		if p.Desc {
			c += " DESC"
		}
		cols = append(cols, c)
	}
	return cols
}

func foreignKeyDefinition(fk *schema.ForeignKey) string {
	var cols, refs []string
	for _, c := range fk.Columns {
		cols = append(cols, c.Name)
	}
	for _, c := range fk.RefColumns {
		refs = append(refs, c.Name)
	}
	ref := "?"
	if fk.RefTable != nil {
		ref = fk.RefTable.Name
	}
	def := fmt.Sprintf("(%s) REFERENCES %s (%s)", strings.Join(cols, ", "), ref, strings.Join(refs, ", "))
	if fk.OnDelete != "" {
		def += " ON DELETE " + string(fk.OnDelete)
	}
	if fk.OnUpdate != "" {
		def += " ON UPDATE " + string(fk.OnUpdate)
	}
	return def
}
