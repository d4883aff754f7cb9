package lint

import (
	"fmt"

	"ariga.io/atlas/sql/postgres"
	"ariga.io/atlas/sql/schema"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/dsn"
	"github.com/schemastate/schemastate/reconcile"
)

var postgresRules = dialectRules{
	differ:         postgres.DefaultDiff,
	lockHazards:    postgresLockHazards,
	storesOnServer: true,
	noServer:       "postgres: no PostgreSQL --db given, so no server to build its stores on: PostgreSQL was not linted",
	readOnly:       func(t dsn.Target) (dsn.Target, error) { return t, nil },
}

// postgresLockHazards: what rewrites or scans a table under ACCESS
// EXCLUSIVE, and an index built inside the reconcile's transaction.
func postgresLockHazards(d dialect.Dialect, tc reconcile.TableChanges, c schema.Change, phases []reconcile.Phase, add func(Hazard)) {
	switch c := c.(type) {
	case *schema.AddColumn:
		if volatileDefault(c.C) {
			add(Hazard{Code: CodeTableRewrite, Level: LevelRewrite, Table: tc.Table, Column: c.C.Name, copiesRows: true,
				Detail: fmt.Sprintf("ADD COLUMN with the volatile default %s rewrites the table under ACCESS EXCLUSIVE", exprText(c.C.Default)),
				Advice: "add the column with a constant default (or none) and fill it in batches"})
		}
	case *schema.ModifyColumn:
		if c.Change.Is(schema.ChangeType) && !catalogOnlyType(c.From.Type.Type, c.To.Type.Type) && !widenedOnline(phases, tc.Table) {
			add(Hazard{Code: CodeTableRewrite, Level: LevelRewrite, Table: tc.Table, Column: c.To.Name, copiesRows: true,
				Detail: fmt.Sprintf("ALTER COLUMN TYPE %s → %s rewrites the table under ACCESS EXCLUSIVE (a table above the online threshold is widened online instead — rebuilt into a shadow table, or in expand/copy/contract phases — when the column allows it)", reconcile.TypeName(d, c.From.Type.Type), reconcile.TypeName(d, c.To.Type.Type)),
				Advice: "ship it when the table is small, or make the column nullable, without default or index, so it is widened online"})
		}
		if c.Change.Is(schema.ChangeNull) && !c.To.Type.Null && !validatedNotNull(tc.Live, c.To.Name) {
			add(Hazard{Code: CodeTableRewrite, Level: LevelRewrite, Table: tc.Table, Column: c.To.Name, copiesRows: true,
				Detail: "SET NOT NULL without a validated CHECK (… IS NOT NULL) scans the whole table under ACCESS EXCLUSIVE",
				Advice: "add CHECK (col IS NOT NULL) NOT VALID, VALIDATE it, then SET NOT NULL (catalog-only on PostgreSQL ≥ 12)"})
		}
	case *schema.AddIndex:
		if !builtConcurrently(phases, tc.Table, c.I.Name) {
			add(Hazard{Code: CodeIndexNotConc, Level: LevelRewrite, Table: tc.Table, Index: c.I.Name, copiesRows: true,
				Detail: fmt.Sprintf("index %s (%s) is built inside the reconcile's transaction, without CONCURRENTLY: writers wait for the whole build (tables at or above the online threshold build it CONCURRENTLY)", c.I.Name, indexColumns(c.I)),
				Advice: "expected for a small table; on a large one confirm the online threshold (reconcile.WithOnlineAbove) sends it to the CONCURRENTLY path"})
		}
	}
}
