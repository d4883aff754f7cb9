package lint

import (
	"strings"

	"ariga.io/atlas/sql/schema"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/reconcile"
)

// cost says whether a phase's time grows with the table's rows. The lock
// class answers for most phases; an alter phase (SQLite's, or PostgreSQL's
// single-transaction path, whose lock class is the conservative
// access_exclusive_rewrite) is catalog-only unless one of its statements
// fills, builds or checks something row by row.
func cost(d dialect.Dialect, ph reconcile.Phase, tables []reconcile.TableChanges) string {
	switch ph.Name {
	case reconcile.PhaseCreate, reconcile.PhaseSwapKey, reconcile.PhaseDropIndex, reconcile.PhaseWidenExpand, reconcile.PhaseWidenContract,
		reconcile.PhaseRebuildAbandon, reconcile.PhaseRebuildPrepare, reconcile.PhaseRebuildSwap:
		return CostCatalog
	case reconcile.PhaseAlter:
	default:
		return CostRows // rebuild, build_index, widen, widen_copy, rebuild_copy, _replay, _index, _finish
	}
	for _, s := range ph.SQL {
		u := strings.ToUpper(s)
		if strings.HasPrefix(u, "UPDATE ") || strings.HasPrefix(u, "CREATE INDEX") || strings.HasPrefix(u, "CREATE UNIQUE INDEX") ||
			strings.Contains(u, " UNIQUE (") {
			return CostRows
		}
	}
	if rulesFor(d).altersCatalogOnly {
		return CostCatalog
	}
	for _, tc := range tables {
		if tc.Table != ph.Table {
			continue
		}
		for _, c := range tc.Changes {
			switch c := c.(type) {
			case *schema.AddColumn:
				if volatileDefault(c.C) {
					return CostRows
				}
			case *schema.ModifyColumn:
				if c.Change.Is(schema.ChangeType) && !catalogOnlyType(c.From.Type.Type, c.To.Type.Type) && !widens(ph, c) ||
					c.Change.Is(schema.ChangeNull) && !c.To.Type.Null {
					return CostRows
				}
			case *schema.AddIndex, *schema.AddForeignKey, *schema.AddCheck:
				return CostRows
			}
		}
	}
	return CostCatalog
}

// widens reports a type change the alter phase does not carry (a widening
// is its own phase, after the shape step).
func widens(ph reconcile.Phase, c *schema.ModifyColumn) bool {
	for _, s := range ph.SQL {
		if strings.Contains(s, dialect.QuoteIdent(c.To.Name)+" TYPE") {
			return false
		}
	}
	return true
}
