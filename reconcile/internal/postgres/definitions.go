package postgres

import (
	"context"
	"fmt"
	"sort"
	"strings"

	atlaspg "ariga.io/atlas/sql/postgres"
	"ariga.io/atlas/sql/schema"

	"github.com/schemastate/schemastate/internal/describe"
	"github.com/schemastate/schemastate/reconcile/internal/core"
	"github.com/schemastate/schemastate/reconcile/internal/postgres/pgsql"
	"github.com/schemastate/schemastate/reconcile/internal/postgres/rebuild"
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
	return "c.contype = 'c' AND pg_get_expr(c.conbin, c.conrelid) = " + pgsql.Literal(expr)
}

// fkMatches is the condition that pg_constraint row c is foreign key fk of
// the table: its columns and the parent's in order, the parent, the
// actions, MATCH SIMPLE, not deferrable.
func fkMatches(refTable string, fk *schema.ForeignKey) string {
	cols := func(rel, key string, cs []*schema.Column) string {
		names := make([]string, len(cs))
		for i, c := range cs {
			names[i] = pgsql.Literal(c.Name)
		}
		return fmt.Sprintf("ARRAY(SELECT a.attname::text FROM unnest(c.%s) WITH ORDINALITY k(n, o) JOIN pg_attribute a ON a.attrelid = c.%s AND a.attnum = k.n ORDER BY k.o) = ARRAY[%s]::text[]",
			key, rel, strings.Join(names, ", "))
	}
	return fmt.Sprintf("c.contype = 'f' AND c.confrelid = to_regclass(%s) AND %s AND %s AND c.confupdtype = '%c' AND c.confdeltype = '%c' AND c.confmatchtype = 's' AND NOT c.condeferrable",
		pgsql.Literal(refTable), cols("conrelid", "conkey", fk.Columns), cols("confrelid", "confkey", fk.RefColumns), actionCode(fk.OnUpdate), actionCode(fk.OnDelete))
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
		if !ok || !deferrable[l.Symbol] || core.HasChange(changes, core.ObjectForeignKey, w.Symbol) {
			continue
		}
		changes = append(changes, &schema.ModifyForeignKey{From: l, To: w, Change: schema.ChangeAttr})
	}
	return changes
}

// indexMatches is the condition that pg_index row i is idx as declared
// (unique when unique): uniqueness and NULLS [NOT] DISTINCT, the key parts
// in order with their direction and NULLs placement (an expression part as
// "(expression)") and each one's operator class (the named one, else its
// type's default) and collation (its column's), the INCLUDE columns in
// order, a predicate or none, the access method. (Not compared: an operator
// class's parameters, which Atlas's inspection does not read either.)
func indexMatches(idx *schema.Index, unique bool) string {
	parts := make([]string, len(idx.Parts))
	for i, p := range idx.Parts {
		s := "(expression)"
		if p.C != nil {
			s = p.C.Name
		}
		parts[i] = pgsql.Literal(s + describe.PartOrder(p))
	}
	opclasses := partSorting(idx)
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
		return fmt.Sprintf("(%s, %s)", pgsql.Literal(x), pgsql.Literal("("+x+")"))
	}
	x := describe.Index(idx)
	if x.Predicate != "" {
		spelled += " AND pg_get_expr(i.indpred, i.indrelid) IN " + either(x.Predicate)
	}
	for k, part := range idx.Parts {
		if x, ok := part.X.(*schema.RawExpr); ok && part.C == nil {
			spelled += fmt.Sprintf(" AND pg_get_indexdef(i.indexrelid, %d, false) IN %s", k+1, either(x.X))
		}
	}
	include := make([]string, len(x.Include))
	for k, c := range x.Include {
		include[k] = pgsql.Literal(c)
	}
	if len(include) > 0 {
		spelled += fmt.Sprintf(` AND ARRAY(SELECT a.attname::text FROM unnest(i.indkey::int2[]) WITH ORDINALITY k(n, o) JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.n
   WHERE k.o > i.indnkeyatts ORDER BY k.o) = ARRAY[%s]::text[]`, strings.Join(include, ", "))
	}
	// indnullsnotdistinct is PostgreSQL 15's; read through the row's JSON, so
	// an older server (where every unique index's NULLs are distinct) has none.
	return fmt.Sprintf(`i.indisunique = %t AND i.indnkeyatts = %d AND i.indnatts = %d AND (i.indpred IS NOT NULL) = %t
 AND COALESCE((to_jsonb(i) ->> 'indnullsnotdistinct')::boolean, false) = %t%s%s
 AND ARRAY(SELECT COALESCE(a.attname::text, '(expression)') || CASE WHEN i.indoption[k.o - 1] & 1 = 1 THEN ' DESC' ELSE '' END
     || CASE WHEN (i.indoption[k.o - 1] & 2 = 2) = (i.indoption[k.o - 1] & 1 = 1) THEN '' WHEN i.indoption[k.o - 1] & 2 = 2 THEN ' NULLS FIRST' ELSE ' NULLS LAST' END
   FROM unnest(i.indkey::int2[]) WITH ORDINALITY k(n, o) LEFT JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.n AND k.n <> 0
   WHERE k.o <= i.indnkeyatts ORDER BY k.o) = ARRAY[%s]::text[]
 AND (SELECT am.amname FROM pg_class ic JOIN pg_am am ON am.oid = ic.relam WHERE ic.oid = i.indexrelid) = %s`,
		unique, len(idx.Parts), len(idx.Parts)+len(include), describe.IsPartial(idx), x.NullsNotDistinct, spelled, opclasses, strings.Join(parts, ", "), pgsql.Literal(method))
}

// partSorting is the condition that each key part of pg_index row i sorts
// as idx's declares: by the operator class named (else its type's
// default), and a column's part by the column's collation.
func partSorting(idx *schema.Index) string {
	cond := ""
	for i, p := range idx.Parts {
		opc := fmt.Sprintf("(SELECT opc.opcdefault FROM pg_opclass opc WHERE opc.oid = i.indclass[%d])", i)
		if name := describe.PartOpClass(p); name != "" {
			_, bare, _ := strings.Cut(name, ".")
			if bare == "" {
				bare = name
			}
			opc = fmt.Sprintf("(SELECT opc.opcname::text FROM pg_opclass opc WHERE opc.oid = i.indclass[%d]) = %s", i, pgsql.Literal(bare))
		}
		cond += " AND " + opc
		if p.C != nil { // a declared part sorts by its column's collation
			cond += fmt.Sprintf(" AND i.indcollation[%d] = (SELECT a.attcollation FROM pg_attribute a WHERE a.attrelid = i.indrelid AND a.attnum = i.indkey[%d])", i, i)
		}
	}
	return cond
}

// indexIs is the done-check that index qname is idx as declared and valid.
func indexIs(qname string, idx *schema.Index, unique bool) string {
	return fmt.Sprintf("EXISTS (SELECT 1 FROM pg_index i WHERE i.indexrelid = to_regclass(%s) AND i.indisvalid AND %s)", pgsql.Literal(qname), indexMatches(idx, unique))
}

// unusable names the table's indexes and constraints no statement can use
// as what they declare: INVALID indexes (a concurrent build that failed or
// is under way: no ON CONFLICT arbiter, 42P10), NOT VALID checks and
// foreign keys (they hold for new rows only), DEFERRABLE unique constraints
// (no ON CONFLICT arbiter either).
func unusable(ctx context.Context, q core.Querier, table string) (map[string]bool, error) {
	return nameSet(ctx, q, "unusable indexes and constraints", table, `SELECT c.relname::text FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
 WHERE i.indrelid = to_regclass(quote_ident(current_schema()) || '.' || quote_ident($1)) AND NOT i.indisvalid
UNION SELECT con.conname::text FROM pg_constraint con
 WHERE con.conrelid = to_regclass(quote_ident(current_schema()) || '.' || quote_ident($1)) AND (NOT con.convalidated OR con.contype = 'u' AND con.condeferrable)`, table)
}

// deferrableForeignKeys names the table's DEFERRABLE foreign keys.
func deferrableForeignKeys(ctx context.Context, q core.Querier, schemaName, table string) (map[string]bool, error) {
	return nameSet(ctx, q, "deferrable foreign keys", table, `SELECT conname::text FROM pg_constraint WHERE conrelid = to_regclass($1) AND contype = 'f' AND condeferrable`, pgsql.Qualified(schemaName, table))
}

// nameSet runs query, which lists names in one text column, and returns
// them as a set; what names them for the error, with table.
func nameSet(ctx context.Context, q core.Querier, what, table, query string, args ...any) (map[string]bool, error) {
	names, err := core.QueryStrings(ctx, q, query, args...)
	if err != nil {
		return nil, fmt.Errorf("read the %s of %s: %w", what, table, err)
	}
	out := make(map[string]bool, len(names))
	for _, n := range names {
		out[n] = true
	}
	return out, nil
}

// indexMethod is idx's declared access method ("" when none is declared).
func indexMethod(idx *schema.Index) string {
	for _, a := range idx.Attrs {
		if t, ok := a.(*atlaspg.IndexType); ok {
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

// shadowTable is what a shadow-table rebuild in flight has built under its
// names: the new table's columns (by name, as format_type prints each
// type) and its indexes (by name, as pg_get_indexdef prints each), beside
// the live table's columns. Nil when no new table exists.
type shadowTable struct {
	columns, live, indexes map[string]string
}

// readRebuildTable reads the rebuild's new table of table, if any.
func readRebuildTable(ctx context.Context, q core.Querier, schemaName, table string) (*shadowTable, error) {
	rows, err := q.QueryContext(ctx, `SELECT 'c', attrelid = to_regclass($1), attname::text, format_type(atttypid, atttypmod) FROM pg_attribute
 WHERE attrelid IN (to_regclass($1), to_regclass($2)) AND attnum > 0 AND NOT attisdropped
UNION ALL SELECT 'i', true, c.relname::text, pg_get_indexdef(i.indexrelid) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = to_regclass($1)`,
		pgsql.Qualified(schemaName, rebuild.NewTable(table)), pgsql.Qualified(schemaName, table))
	if err != nil {
		return nil, fmt.Errorf("read the rebuild's new table of %s: %w", table, err)
	}
	defer rows.Close()
	rt := &shadowTable{columns: map[string]string{}, live: map[string]string{}, indexes: map[string]string{}}
	for rows.Next() {
		var kind, name, def string
		var isNew bool
		if err := rows.Scan(&kind, &isNew, &name, &def); err != nil {
			return nil, err
		}
		switch {
		case kind == "i":
			rt.indexes[name] = def
		case isNew:
			rt.columns[name] = def
		default:
			rt.live[name] = def
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(rt.columns) == 0 {
		return nil, nil
	}
	return rt, nil
}

// twins describes what the new table holds under the rebuild's names with
// another definition than the rebuild makes: a column that is not the live
// one (the widened ones bigint), an index built under an index's rebuild
// name (rebuild.TempIndex) that is not that index. Empty when it is the
// rebuild's own.
func (rt *shadowTable) twins(widened []*schema.Column, indexes []rebuild.LiveIndex) []string {
	if rt == nil {
		return nil
	}
	want := map[string]string{}
	for name, typ := range rt.live {
		if !strings.HasSuffix(name, shadowSuffix) {
			want[name] = typ
		}
	}
	for _, c := range widened {
		want[c.Name] = "bigint"
	}
	var out []string
	for name, typ := range rt.columns {
		if want[name] != typ {
			out = append(out, fmt.Sprintf("column %s of the new table found as %s, not %s", name, typ, orAbsent(want[name])))
		}
	}
	for name := range want {
		if _, ok := rt.columns[name]; !ok {
			out = append(out, fmt.Sprintf("column %s missing from the rebuild's new table", name))
		}
	}
	tail := func(def string) string {
		unique := strings.HasPrefix(def, "CREATE UNIQUE ")
		if i := strings.Index(def, " USING "); i >= 0 {
			def = def[i:]
		}
		return fmt.Sprintf("%t%s", unique, def)
	}
	for _, ix := range indexes {
		tmp := rebuild.TempIndex(ix.Name)
		if def, ok := rt.indexes[tmp]; ok && tail(def) != tail(ix.Def) {
			out = append(out, fmt.Sprintf("index %s (for %s) found as %s", tmp, ix.Name, def))
		}
	}
	sort.Strings(out)
	return out
}

func orAbsent(s string) string {
	if s == "" {
		return "absent"
	}
	return s
}
