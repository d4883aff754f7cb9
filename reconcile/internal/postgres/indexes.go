package postgres

import (
	"context"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"unicode/utf8"

	atlaspg "ariga.io/atlas/sql/postgres"
	"ariga.io/atlas/sql/schema"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/describe"
	"github.com/schemastate/schemastate/internal/ops"
	"github.com/schemastate/schemastate/reconcile/internal/core"
	"github.com/schemastate/schemastate/reconcile/internal/postgres/pgsql"
	"github.com/schemastate/schemastate/reconcile/internal/postgres/rebuild"
)

// afterShape is the live table's index set as the shape phases leave it —
// what the rebuild then carries. (Reconcile plans the widening again once
// the shape step has applied, from the catalog; this keeps the dry run's
// phases the ones it runs.)
func afterShape(schemaName string, tp *pgTablePlan, builds, dropKeys, dropIndexes []*schema.Index) []rebuild.LiveIndex {
	rb := tp.Inflight.rebuild
	if rb == nil {
		return nil
	}
	gone := map[string]bool{}
	for _, idx := range append(append([]*schema.Index(nil), dropKeys...), dropIndexes...) {
		gone[idx.Name] = true
	}
	var out []rebuild.LiveIndex
	for _, next := range tp.Inflight.next {
		gone[next] = true // swapped in or dropped by the shape phases
	}
	for _, next := range tp.Inflight.orphans {
		gone[next] = true
	}
	for _, ix := range rb.Indexes {
		if to, ok := tp.Inflight.renamed[ix.Name]; ok {
			ix.Name, ix.ConstraintName = to, to
		}
		if !gone[ix.Name] {
			out = append(out, ix)
		}
	}
	for _, idx := range builds {
		ix := rebuild.LiveIndex{Name: idx.Name, Prefix: "INDEX " + dialect.QuoteIdent(idx.Name) + " ON " + pgsql.Qualified(schemaName, tp.Table) + " "}
		unique := ""
		if idx.Unique {
			unique = "UNIQUE "
		}
		if !plainColumns(idx) {
			// Not predicted: with a widening planned, such an index stays in
			// the alter (planOnline), and without one no rebuild reads it.
			continue
		}
		cols := make([]string, len(idx.Parts))
		for i, part := range idx.Parts {
			cols[i] = rb.Quote(part.C.Name)
			if part.Desc {
				cols[i] += " DESC"
			}
		}
		ix.Def = "CREATE " + unique + ix.Prefix + "USING btree (" + strings.Join(cols, ", ") + ")"
		if isUniqueConstraint(idx) {
			ix.Contype, ix.ConstraintName = "u", idx.Name
		}
		out = append(out, ix)
	}
	slices.SortFunc(out, func(a, b rebuild.LiveIndex) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// buildable reports an index CREATE INDEX CONCURRENTLY can build as
// rendered here (indexBody): columns or expressions, with an access method
// and a predicate or not, nothing else.
func buildable(idx *schema.Index) bool {
	if len(idx.Parts) == 0 {
		return false
	}
	for _, p := range idx.Parts {
		if _, raw := p.X.(*schema.RawExpr); p.C == nil && !raw || len(p.Attrs) > 0 {
			return false
		}
	}
	for _, a := range idx.Attrs {
		switch a.(type) {
		case *atlaspg.IndexType, *atlaspg.IndexPredicate, *atlaspg.Constraint:
		default:
			return false
		}
	}
	return true
}

// plainColumns reports an index of columns alone, with no predicate.
func plainColumns(idx *schema.Index) bool {
	for _, p := range idx.Parts {
		if p.C == nil {
			return false
		}
	}
	return !hasPredicate(idx)
}

// indexBody is what follows CREATE INDEX … ON table: the method, the parts
// and the predicate.
func indexBody(idx *schema.Index) string {
	body := "(" + indexColumns(idx) + ")"
	for _, a := range idx.Attrs {
		if t, ok := a.(*atlaspg.IndexType); ok && t.T != "" && !strings.EqualFold(t.T, "btree") {
			body = "USING " + strings.ToLower(t.T) + " " + body
		}
	}
	for _, a := range idx.Attrs {
		if p, ok := a.(*atlaspg.IndexPredicate); ok && p.P != "" {
			body += " WHERE " + p.P
		}
	}
	return body
}

func indexColumns(idx *schema.Index) string {
	cols := make([]string, len(idx.Parts))
	for i, p := range idx.Parts {
		if p.C != nil {
			cols[i] = dialect.QuoteIdent(p.C.Name)
		} else {
			cols[i] = "(" + p.X.(*schema.RawExpr).X + ")"
		}
		if p.Desc {
			cols[i] += " DESC"
		}
	}
	return strings.Join(cols, ", ")
}

// renameEquivalentUniques finds, on PostgreSQL, a live UNIQUE constraint that
// is a declared one under another name — the host's own DDL leaves the
// three-column key auto-named — and plans a RENAME CONSTRAINT instead of the
// drop and re-add a name-based diff would plan (which rebuilds the unique
// index under an ACCESS EXCLUSIVE lock). The returned table is live with
// the declared name, so the diff sees the same constraint; renamed maps each
// old name to its new one. A partial index, a plain unique index and a
// column order that differs are never equivalent.
func renameEquivalentUniques(schemaName string, live, want *schema.Table, deferrable map[string]bool) (_ *schema.Table, stmts []string, renamed map[string]string) {
	live, renamed = core.CloneTable(live), map[string]string{}
	for _, idx := range live.Indexes {
		if !isUniqueConstraint(idx) || deferrable[idx.Name] {
			continue
		}
		if _, declared := want.Index(idx.Name); declared {
			continue
		}
		for _, w := range want.Indexes {
			if _, taken := live.Index(w.Name); taken || !w.Unique || !core.SameColumns(idx, w) || hasPredicate(idx) {
				continue
			}
			stmts = append(stmts, fmt.Sprintf("ALTER TABLE %s.%s RENAME CONSTRAINT %s TO %s",
				dialect.QuoteIdent(schemaName), dialect.QuoteIdent(live.Name), dialect.QuoteIdent(idx.Name), dialect.QuoteIdent(w.Name)))
			renamed[idx.Name] = w.Name
			idx.Name = w.Name
			idx.Attrs = append([]schema.Attr(nil), w.Attrs...)
			break
		}
	}
	return live, stmts, renamed
}

func isUniqueConstraint(idx *schema.Index) bool {
	for _, a := range idx.Attrs {
		if c, ok := a.(*atlaspg.Constraint); ok && c.T == "u" {
			return idx.Unique
		}
	}
	return false
}

func hasPredicate(idx *schema.Index) bool {
	for _, a := range idx.Attrs {
		if _, ok := a.(*atlaspg.IndexPredicate); ok {
			return true
		}
	}
	return false
}

// replaceDeferrableKeys plans, on PostgreSQL, replacing a declared unique
// constraint that is live but DEFERRABLE: it is not the declared key (no ON
// CONFLICT arbiter, see unusable), yet Atlas's diff, blind to
// deferrability, sees no change, and every boot would observe the end state
// missing and change nothing. The returned table is live without the
// constraint, so the diff adds the declared one, and the returned statement
// drops it first, in the same transaction. deferrable names every deferrable
// unique (tableFacts), which renameEquivalentUniques never adopts either.
func replaceDeferrableKeys(schemaName string, live, want *schema.Table, deferrable map[string]bool) (*schema.Table, []string) {
	var stmts []string
	live = core.CloneTable(live)
	live.Indexes = slices.DeleteFunc(live.Indexes, func(idx *schema.Index) bool {
		if _, declared := want.Index(idx.Name); !declared || !deferrable[idx.Name] {
			return false
		}
		stmts = append(stmts, fmt.Sprintf("ALTER TABLE %s.%s DROP CONSTRAINT %s",
			dialect.QuoteIdent(schemaName), dialect.QuoteIdent(live.Name), dialect.QuoteIdent(idx.Name)))
		return true
	})
	return live, stmts
}

func deferrableUniques(ctx context.Context, q core.Querier, table string) (map[string]bool, error) {
	names, err := core.QueryStrings(ctx, q, `SELECT con.conname FROM pg_constraint con
  JOIN pg_class c ON c.oid = con.conrelid JOIN pg_namespace n ON n.oid = c.relnamespace
  WHERE n.nspname = current_schema() AND c.relname = $1 AND con.contype = 'u' AND con.condeferrable`, table)
	if err != nil {
		return nil, err
	}
	deferrable := map[string]bool{}
	for _, n := range names {
		deferrable[n] = true
	}
	return deferrable, nil
}

// nextIndexPrefix begins the name of an index built beside the index it
// replaces (replaceIndex).
const nextIndexPrefix = "schemastate_next_"

// nextIndexName is the name the new definition of index name is built under:
// the prefix and the name, cut to PostgreSQL's 63 bytes with a hash of the
// whole name when it is longer.
func nextIndexName(name string) string {
	n := nextIndexPrefix + name
	if len(n) <= 63 {
		return n
	}
	h := fnv.New32a()
	h.Write([]byte(name))
	cut := 63 - 9
	for cut > 0 && !utf8.RuneStart(n[cut]) {
		cut--
	}
	return fmt.Sprintf("%s_%08x", n[:cut], h.Sum32())
}

// replaceIndex is the recipe for an index whose definition changed under its
// name (its columns, expressions, predicate, method or uniqueness): the new
// definition is built CONCURRENTLY beside it, under nextIndexName, and one
// catalog-only transaction swaps it in — the old index (or its unique
// constraint) dropped, the new one renamed to the declared name and, for a
// unique constraint, attached. rebuild drops an INVALID build left by an
// earlier boot first.
func (p recipePlanner) replaceIndex(m *schema.ModifyIndex, rebuild bool) []ops.Phase {
	to := m.To
	next := nextIndexName(to.Name)
	qnext := pgsql.Qualified(p.schema, next)
	qn := dialect.QuoteIdent(to.Name)
	detail := fmt.Sprintf("%s; index %s redefined: built CONCURRENTLY as %s, then swapped in", p.why, to.Name, next)
	swap := []string{"DROP INDEX " + pgsql.Qualified(p.schema, to.Name)}
	if isUniqueConstraint(m.From) {
		swap[0] = fmt.Sprintf("ALTER TABLE %s DROP CONSTRAINT %s", p.qt, qn)
	}
	swap = append(swap, fmt.Sprintf("ALTER INDEX %s RENAME TO %s", qnext, qn))
	if isUniqueConstraint(to) {
		swap = append(swap, fmt.Sprintf("ALTER TABLE %s ADD CONSTRAINT %s UNIQUE USING INDEX %s", p.qt, qn, qn))
	}
	return []ops.Phase{
		buildConcurrently(p.schema, p.table, next, to, to.Unique, rebuild, detail),
		{Step: core.StepShape, Name: ops.PhaseSwapIndex, Kind: ops.KindStatements, Table: p.table, Object: to.Name, SQL: swap, Transactional: true, Lock: ops.LockCatalog,
			DoneWhen: fmt.Sprintf("SELECT to_regclass(%s) IS NULL AND %s", pgsql.Literal(qnext), indexIs(pgsql.Qualified(p.schema, to.Name), to, to.Unique)),
			Detail:   detail},
	}
}

// buildConcurrently is the phase that builds idx (UNIQUE when unique)
// CONCURRENTLY under name — its own, or the one a new definition is built
// beside its index under — dropping first the INVALID build an earlier boot
// left (rebuild). A failed build's Cleanup drops what it left.
func buildConcurrently(schemaName, table, name string, idx *schema.Index, unique, rebuild bool, detail string) ops.Phase {
	qname := pgsql.Qualified(schemaName, name)
	var sqls []string
	if rebuild {
		sqls = append(sqls, "DROP INDEX CONCURRENTLY IF EXISTS "+qname)
	}
	kw, key := "", []string(nil)
	if unique {
		kw = "UNIQUE "
		if plainColumns(idx) {
			key = describe.ColumnNames(idx) // the duplicates a failed build names
		}
	}
	sqls = append(sqls, fmt.Sprintf("CREATE %sINDEX CONCURRENTLY %s ON %s %s", kw, dialect.QuoteIdent(name), pgsql.Qualified(schemaName, table), indexBody(idx)))
	return ops.Phase{Step: core.StepShape, Name: ops.PhaseBuildIndex, Kind: ops.KindConcurrent, Table: table, Object: name, SQL: sqls, Scans: true,
		Key: key, Lock: ops.LockShareUpdateExclusive,
		DoneWhen: "SELECT " + indexIs(qname, idx, unique),
		Cleanup:  []string{"DROP INDEX CONCURRENTLY IF EXISTS " + qname},
		Detail:   detail}
}

// dropConcurrently is the phase that drops index name CONCURRENTLY.
func dropConcurrently(schemaName, table, name, detail string) ops.Phase {
	qname := pgsql.Qualified(schemaName, name)
	return ops.Phase{Step: core.StepShape, Name: ops.PhaseDropIndex, Kind: ops.KindConcurrent, Table: table, Object: name,
		SQL:  []string{"DROP INDEX CONCURRENTLY IF EXISTS " + qname},
		Lock: ops.LockShareUpdateExclusive, DoneWhen: fmt.Sprintf("SELECT to_regclass(%s) IS NULL", pgsql.Literal(qname)), Detail: detail}
}

// primaryKeyName is the name of the table's declared primary key
// constraint: as declared, else as it is live, else PostgreSQL's default.
func primaryKeyName(live, want *schema.Table) string {
	switch {
	case want.PrimaryKey != nil && want.PrimaryKey.Name != "":
		return want.PrimaryKey.Name
	case live != nil && live.PrimaryKey != nil && live.PrimaryKey.Name != "":
		return live.PrimaryKey.Name
	}
	return want.Name + "_pkey"
}

// onlinePrimaryKey reports a declared primary key the recipe can build
// beside the table: plain columns, each declared NOT NULL (so that ADD
// PRIMARY KEY USING INDEX has no column to scan for NULLs: one the edit
// tightens is made NOT NULL by its own recipe first).
func onlinePrimaryKey(pk *schema.Index, want *schema.Table) bool {
	if pk == nil || len(pk.Parts) == 0 || !plainColumns(pk) {
		return false
	}
	for _, part := range pk.Parts {
		c, ok := want.Column(part.C.Name)
		if !ok || c.Type == nil || c.Type.Null {
			return false
		}
	}
	return true
}

// replacePrimaryKey is the recipe for a primary key added or redefined: its
// unique index built CONCURRENTLY beside the table, then one catalog-only
// transaction drops the old key and makes that index the key (ADD PRIMARY
// KEY USING INDEX, which renames it to the constraint's name).
func (p recipePlanner) replacePrimaryKey(from, to *schema.Index, name string, rebuild bool) []ops.Phase {
	next := nextIndexName(name)
	qnext := pgsql.Qualified(p.schema, next)
	detail := fmt.Sprintf("%s; primary key %s (%s): its index built CONCURRENTLY as %s, then made the key", p.why, name, strings.Join(describe.ColumnNames(to), ", "), next)
	var swap []string
	if from != nil {
		swap = append(swap, fmt.Sprintf("ALTER TABLE %s DROP CONSTRAINT %s", p.qt, dialect.QuoteIdent(from.Name)))
	}
	swap = append(swap, fmt.Sprintf("ALTER TABLE %s ADD CONSTRAINT %s PRIMARY KEY USING INDEX %s", p.qt, dialect.QuoteIdent(name), dialect.QuoteIdent(next)))
	return []ops.Phase{
		buildConcurrently(p.schema, p.table, next, to, true, rebuild, detail),
		{Step: core.StepShape, Name: ops.PhaseSwapIndex, Kind: ops.KindStatements, Table: p.table, Object: name, SQL: swap, Transactional: true, Lock: ops.LockCatalog,
			DoneWhen: fmt.Sprintf("SELECT to_regclass(%s) IS NULL AND %s", pgsql.Literal(qnext), indexIs(pgsql.Qualified(p.schema, name), to, true)),
			Detail:   detail},
	}
}
