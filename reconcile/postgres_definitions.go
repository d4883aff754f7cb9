package reconcile

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"ariga.io/atlas/sql/postgres"
	"ariga.io/atlas/sql/schema"

	"github.com/schemastate/schemastate/internal/describe"
)

// One rule for "already done" on PostgreSQL: an object under a declared name
// is the declared one only when its whole definition is — a check's
// expression as the server normalizes it, a foreign key's columns, parent,
// actions and deferrability, an index's uniqueness, parts, direction,
// method and predicate — and it is usable (a validated constraint, a valid
// index, where the step needs that). The diff compares so (checkFacts,
// fkTwin), and every phase's DoneWhen compares the catalog row so
// (checkMatches, fkMatches, indexMatches). A twin — the declared name with
// another definition — is replaced on the boot that finds it, and the step
// detail names it (inflight.twins).

// checkMatches is the condition that pg_constraint row c is the declared
// check of normalized expression expr ("" when it could not be normalized:
// nothing matches).
func checkMatches(expr string) string {
	if expr == "" {
		return "false"
	}
	return "c.contype = 'c' AND pg_get_expr(c.conbin, c.conrelid) = " + literal(expr)
}

// fkMatches is the condition that pg_constraint row c is foreign key fk of
// the table: its columns and the parent's in order, the parent, the
// actions, MATCH SIMPLE, not deferrable.
func fkMatches(refTable string, fk *schema.ForeignKey) string {
	cols := func(rel, key string, cs []*schema.Column) string {
		names := make([]string, len(cs))
		for i, c := range cs {
			names[i] = literal(c.Name)
		}
		return fmt.Sprintf("ARRAY(SELECT a.attname::text FROM unnest(c.%s) WITH ORDINALITY k(n, o) JOIN pg_attribute a ON a.attrelid = c.%s AND a.attnum = k.n ORDER BY k.o) = ARRAY[%s]::text[]",
			key, rel, strings.Join(names, ", "))
	}
	return fmt.Sprintf("c.contype = 'f' AND c.confrelid = to_regclass(%s) AND %s AND %s AND c.confupdtype = '%c' AND c.confdeltype = '%c' AND c.confmatchtype = 's' AND NOT c.condeferrable",
		literal(refTable), cols("conrelid", "conkey", fk.Columns), cols("confrelid", "confkey", fk.RefColumns), actionCode(fk.OnUpdate), actionCode(fk.OnDelete))
}

// actionCode is a referential action as pg_constraint spells it.
func actionCode(a schema.ReferenceOption) byte {
	switch strings.ToUpper(string(a)) {
	case string(schema.Restrict):
		return 'r'
	case string(schema.Cascade):
		return 'c'
	case string(schema.SetNull):
		return 'n'
	case string(schema.SetDefault):
		return 'd'
	}
	return 'a'
}

// sameForeignKey reports two foreign keys that decide the same violations
// and actions; deferrable names the live table's deferrable ones, which
// the declaration never is.
func sameForeignKey(l, w *schema.ForeignKey, deferrable map[string]bool) bool {
	return !deferrable[l.Symbol] && describe.ForeignKey(l).Decides() == describe.ForeignKey(w).Decides()
}

// fkTwins are the diff's changes Atlas misses on a declared foreign key:
// one live under its name but DEFERRABLE (Atlas does not read
// deferrability).
func fkTwins(live, want *schema.Table, deferrable map[string]bool, changes []schema.Change) []schema.Change {
	for _, w := range want.ForeignKeys {
		l, ok := live.ForeignKey(w.Symbol)
		if !ok || !deferrable[l.Symbol] || hasFKChange(changes, w.Symbol) {
			continue
		}
		changes = append(changes, &schema.ModifyForeignKey{From: l, To: w, Change: schema.ChangeAttr})
	}
	return changes
}

func hasFKChange(changes []schema.Change, name string) bool {
	for _, c := range changes {
		switch c := c.(type) {
		case *schema.ModifyForeignKey:
			if c.To.Symbol == name {
				return true
			}
		case *schema.AddForeignKey:
			if c.F.Symbol == name {
				return true
			}
		}
	}
	return false
}

// indexMatches is the condition that pg_index row i is idx as declared
// (unique when unique): uniqueness, the key parts in order with their
// direction (an expression part as "(expression)"), a predicate or none,
// the access method.
func indexMatches(idx *schema.Index, unique bool) string {
	parts := make([]string, len(idx.Parts))
	for i, p := range idx.Parts {
		s := "(expression)"
		if p.C != nil {
			s = p.C.Name
		}
		if p.Desc {
			s += " DESC"
		}
		parts[i] = literal(s)
	}
	method := "btree"
	if t := indexMethod(idx); t != "" {
		method = strings.ToLower(t)
	}
	// A predicate and an expression are compared as the catalog prints
	// them (the declared one as the scratch table printed it,
	// withServerForms), with or without the parentheses around the whole.
	spelled := ""
	either := func(x string) string {
		x = describe.BareExpr(x)
		return fmt.Sprintf("(%s, %s)", literal(x), literal("("+x+")"))
	}
	if pred := describe.Index(idx).Predicate; pred != "" {
		spelled += " AND pg_get_expr(i.indpred, i.indrelid) IN " + either(pred)
	}
	for k, part := range idx.Parts {
		if x, ok := part.X.(*schema.RawExpr); ok && part.C == nil {
			spelled += fmt.Sprintf(" AND pg_get_indexdef(i.indexrelid, %d, false) IN %s", k+1, either(x.X))
		}
	}
	return fmt.Sprintf(`i.indisunique = %t AND i.indnkeyatts = %d AND (i.indpred IS NOT NULL) = %t%s
 AND ARRAY(SELECT COALESCE(a.attname::text, '(expression)') || CASE WHEN i.indoption[k.o - 1] & 1 = 1 THEN ' DESC' ELSE '' END
   FROM unnest(i.indkey::int2[]) WITH ORDINALITY k(n, o) LEFT JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.n AND k.n <> 0
   WHERE k.o <= i.indnkeyatts ORDER BY k.o) = ARRAY[%s]::text[]
 AND (SELECT am.amname FROM pg_class ic JOIN pg_am am ON am.oid = ic.relam WHERE ic.oid = i.indexrelid) = %s`,
		unique, len(idx.Parts), describe.IsPartial(idx), spelled, strings.Join(parts, ", "), literal(method))
}

// indexIs is the done-check that index qname is idx as declared and valid.
func indexIs(qname string, idx *schema.Index, unique bool) string {
	return fmt.Sprintf("EXISTS (SELECT 1 FROM pg_index i WHERE i.indexrelid = to_regclass(%s) AND i.indisvalid AND %s)", literal(qname), indexMatches(idx, unique))
}

// unusable names the table's indexes and constraints no statement can use
// as what they declare: INVALID indexes (a concurrent build that failed or
// is under way: no ON CONFLICT arbiter, 42P10), NOT VALID checks and
// foreign keys (they hold for new rows only), DEFERRABLE unique constraints
// (no ON CONFLICT arbiter either).
func unusable(ctx context.Context, q querier, table string) (map[string]bool, error) {
	names, err := queryStrings(ctx, q, `SELECT c.relname::text FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
 WHERE i.indrelid = to_regclass(quote_ident(current_schema()) || '.' || quote_ident($1)) AND NOT i.indisvalid
UNION SELECT con.conname::text FROM pg_constraint con
 WHERE con.conrelid = to_regclass(quote_ident(current_schema()) || '.' || quote_ident($1)) AND (NOT con.convalidated OR con.contype = 'u' AND con.condeferrable)`, table)
	if err != nil {
		return nil, fmt.Errorf("read the unusable indexes and constraints of %s: %w", table, err)
	}
	out := map[string]bool{}
	for _, n := range names {
		out[n] = true
	}
	return out, nil
}

// deferrableForeignKeys names the table's DEFERRABLE foreign keys.
func deferrableForeignKeys(ctx context.Context, q querier, schemaName, table string) (map[string]bool, error) {
	names, err := queryStrings(ctx, q, `SELECT conname::text FROM pg_constraint WHERE conrelid = to_regclass($1) AND contype = 'f' AND condeferrable`, qualified(schemaName, table))
	if err != nil {
		return nil, fmt.Errorf("read the deferrable foreign keys of %s: %w", table, err)
	}
	out := map[string]bool{}
	for _, n := range names {
		out[n] = true
	}
	return out, nil
}

// indexMethod is idx's declared access method ("" when none is declared).
func indexMethod(idx *schema.Index) string {
	for _, a := range idx.Attrs {
		if t, ok := a.(*postgres.IndexType); ok {
			return t.T
		}
	}
	return ""
}

// declaredInFlight reports a NOT VALID constraint of a declared name that
// normalizeRecipes took out of live as this recipe's own (the declared
// definition, validated next), not a twin left in it.
func declaredInFlight(live, want *schema.Table, name string) bool {
	if _, ok := want.ForeignKey(name); ok {
		_, kept := live.ForeignKey(name)
		return !kept
	}
	return declaredCheck(want, name) && !declaredCheck(live, name)
}

// twinNotes describe each object the diff found under a declared name with
// another definition, for the step detail: what was found and that the
// declared definition replaces it.
func twinNotes(changes []schema.Change, f tableFacts) []string {
	var out []string
	valid := func(name string) string {
		if f.notValid[name] {
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
				if f.deferrableFKs[c.From.Symbol] {
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

// notNullTwins marks each SET NOT NULL check left under the recipe's name
// whose expression is not the recipe's, to be replaced.
func (f *inflight) notNullTwins() {
	for chk, col := range f.nnChecks {
		l, w := f.checks.live[chk], f.checks.declared[chk]
		if f.checks == nil || w == "" || l == w {
			continue
		}
		f.replace[chk] = true
		f.twins = append(f.twins, fmt.Sprintf("check %s found as CHECK (%s), not the NOT NULL check of %s: replaced", chk, l, col))
	}
	sort.Strings(f.twins)
}

// samePredicate reports two indexes with the same predicate text, or
// neither with one: with describe.SameIndex (whose parts carry the
// expressions' text), the same definition.
func samePredicate(a, b *schema.Index) bool {
	return describe.BareExpr(describe.Index(a).Predicate) == describe.BareExpr(describe.Index(b).Predicate)
}

// indexForms is the declared indexes' server spelling, when read.
func (c *checkFacts) indexForms() map[string]indexForm {
	if c == nil {
		return nil
	}
	return c.indexes
}
