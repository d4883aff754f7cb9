package core

import (
	"fmt"
	"strings"

	"ariga.io/atlas/sql/schema"

	"github.com/schemastate/schemastate/internal/describe"
)

// Twins on either dialect: an object under a declared name with another
// definition. Atlas pairs checks by name and compares nothing else of them
// (its default diff mode is not the normalized one), so the diff adds the
// change it misses (CheckTwins); TwinNotes names what was found, for the
// step detail. PostgreSQL's comparisons are in reconcile/internal/postgres
// (definitions.go and checks.go).

// CheckTwins are the diff's changes Atlas misses: a declared check whose
// name the live table holds with another expression (Atlas pairs checks by
// name and compares nothing else of them).
func CheckTwins(live, want *schema.Table, same func(l, w *schema.Check) bool, changes []schema.Change) []schema.Change {
	for _, a := range want.Attrs {
		w, ok := a.(*schema.Check)
		if !ok || w.Name == "" {
			continue
		}
		for _, la := range live.Attrs {
			if l, ok := la.(*schema.Check); ok && l.Name == w.Name && !same(l, w) && !HasChange(changes, ObjectCheck, w.Name) {
				changes = append(changes, &schema.ModifyCheck{From: l, To: w})
			}
		}
	}
	return changes
}

// Kinds of object a change names (HasChange).
const (
	ObjectCheck      = "check"
	ObjectForeignKey = "foreign key"
	ObjectIndex      = "index"
)

// HasChange reports whether changes hold one that adds or modifies the
// object of kind named name (or, an index, drops it): a twin already in the
// diff is not added again.
func HasChange(changes []schema.Change, kind, name string) bool {
	for _, c := range changes {
		if k, n := changeOf(c); k == kind && n == name {
			return true
		}
	}
	return false
}

// changeOf names the kind and the name of the object c adds or modifies
// (or, an index, drops); "" for any other change.
func changeOf(c schema.Change) (kind, name string) {
	switch c := c.(type) {
	case *schema.ModifyCheck:
		return ObjectCheck, c.To.Name
	case *schema.AddCheck:
		return ObjectCheck, c.C.Name
	case *schema.ModifyForeignKey:
		return ObjectForeignKey, c.To.Symbol
	case *schema.AddForeignKey:
		return ObjectForeignKey, c.F.Symbol
	case *schema.ModifyIndex:
		return ObjectIndex, c.To.Name
	case *schema.AddIndex:
		return ObjectIndex, c.I.Name
	case *schema.DropIndex:
		return ObjectIndex, c.I.Name
	}
	return "", ""
}

// SameCheckText compares two checks as SQLite stores them, in the table's
// SQL: the expression without its outer parentheses, its white space
// collapsed.
func SameCheckText(l, w *schema.Check) bool {
	norm := func(x string) string { return strings.Join(strings.Fields(describe.BareExpr(x)), " ") }
	return norm(l.Expr) == norm(w.Expr)
}

// TwinNotes describe each object the diff found under a declared name with
// another definition, for the step detail: what was found and that the
// declared definition replaces it.
func TwinNotes(changes []schema.Change, notValid, deferrable map[string]bool) []string {
	var out []string
	valid := func(name string) string {
		if notValid[name] {
			return " NOT VALID"
		}
		return ""
	}
	for _, c := range changes {
		switch c := c.(type) {
		case *schema.ModifyCheck:
			if c.From.Name == c.To.Name {
				out = append(out, fmt.Sprintf("check %s found as CHECK (%s)%s, declared CHECK (%s): replaced", c.To.Name, c.From.Expr, valid(c.From.Name), c.To.Expr))
			}
		case *schema.ModifyForeignKey:
			if c.From.Symbol == c.To.Symbol {
				found := describe.ForeignKey(c.From).Definition()
				if deferrable[c.From.Symbol] {
					found += " DEFERRABLE"
				}
				out = append(out, fmt.Sprintf("foreign key %s found as %s%s, declared %s: replaced", c.To.Symbol, found, valid(c.From.Symbol), describe.ForeignKey(c.To).Definition()))
			}
		case *schema.ModifyIndex:
			if c.From.Name == c.To.Name && c.Change&^schema.ChangeComment != schema.NoChange {
				out = append(out, fmt.Sprintf("index %s found as %s, declared %s: replaced", c.To.Name, describe.Index(c.From).Definition(), describe.Index(c.To).Definition()))
			}
		}
	}
	return out
}

// NameTwins names, in the detail of a table's phases that have none (a
// SQLite rebuild or alter), each twin the diff found: what the step found
// and replaced. PostgreSQL's phases name them in their detail already.
func NameTwins(tp *TablePlan) {
	if tp.Twins != nil {
		return
	}
	notes := TwinNotes(tp.Changes, nil, nil)
	if len(notes) == 0 {
		return
	}
	for i := range tp.Phases {
		if tp.Phases[i].Detail == "" {
			tp.Phases[i].Detail = "under a declared name: " + strings.Join(notes, "; ")
		}
	}
}
