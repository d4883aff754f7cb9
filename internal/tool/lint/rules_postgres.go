package lint

import (
	"fmt"

	"ariga.io/atlas/sql/postgres"
	"ariga.io/atlas/sql/schema"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/describe"
	"github.com/schemastate/schemastate/internal/ops"
	"github.com/schemastate/schemastate/internal/tool/dsn"
	"github.com/schemastate/schemastate/internal/typechange"
)

var postgresRules = dialectRules{
	differ:         postgres.DefaultDiff,
	lockHazards:    postgresLockHazards,
	storesOnServer: true,
	noServer:       "postgres: no PostgreSQL --db given, so no server to build its stores on: PostgreSQL was not linted",
	readOnly:       func(t dsn.Target) (dsn.Target, error) { return t, nil },
}

// postgresLockHazards: what rewrites or scans a table under ACCESS
// EXCLUSIVE (or a foreign key's SHARE ROW EXCLUSIVE), and an index built
// inside the reconcile's transaction — unless the plan's phases make the
// change online (an online recipe's phase names the column or constraint).
func postgresLockHazards(d dialect.Dialect, tc ops.TableChanges, c schema.Change, phases []ops.Phase, add func(Hazard)) {
	switch c := c.(type) {
	case *schema.AddColumn:
		if _, raw := c.C.Default.(*schema.RawExpr); raw && !hasPhase(phases, tc.Table, ops.PhaseAddColumn, c.C.Name) && alterScans(phases, tc.Table) {
			add(Hazard{Code: CodeTableRewrite, Level: LevelRewrite, Table: tc.Table, Column: c.C.Name, copiesRows: true,
				Detail: fmt.Sprintf("ADD COLUMN with the default %s may rewrite the table under ACCESS EXCLUSIVE (a volatile default is evaluated for every row; a table above the online threshold adds it nullable and fills it in batches)", describe.Expr(c.C.Default)),
				Advice: "expected for a small table; on a large one confirm the online threshold (reconcile.WithOnlineAbove) sends it to the online recipe"})
		}
	case *schema.ModifyColumn:
		if c.Change.Is(schema.ChangeType) && !typechange.BinaryCoercible(c.From.Type.Type, c.To.Type.Type) && !widenedOnline(phases, tc.Table) {
			add(Hazard{Code: CodeTableRewrite, Level: LevelRewrite, Table: tc.Table, Column: c.To.Name, copiesRows: true,
				Detail: fmt.Sprintf("ALTER COLUMN TYPE %s → %s rewrites the table under ACCESS EXCLUSIVE (a table above the online threshold is widened online instead — rebuilt into a shadow table, or in expand/copy/contract phases — when the column allows it)", typechange.Name(d, c.From.Type.Type), typechange.Name(d, c.To.Type.Type)),
				Advice: "ship it when the table is small, or make the column nullable, without default or index, so it is widened online"})
		}
		if c.Change.Is(schema.ChangeNull) && !c.To.Type.Null && !hasPhase(phases, tc.Table, ops.PhaseSetNotNull, c.To.Name) {
			add(Hazard{Code: CodeTableRewrite, Level: LevelRewrite, Table: tc.Table, Column: c.To.Name, copiesRows: true,
				Detail: "SET NOT NULL scans the whole table under ACCESS EXCLUSIVE (a table above the online threshold validates a CHECK (… IS NOT NULL) NOT VALID first, and SET NOT NULL skips the scan)",
				Advice: "expected for a small table; on a large one confirm the online threshold (reconcile.WithOnlineAbove) sends it to the online recipe"})
		}
	case *schema.AddCheck:
		if !hasPhase(phases, tc.Table, ops.PhaseValidate, c.C.Name) {
			add(Hazard{Code: CodeTableRewrite, Level: LevelRewrite, Table: tc.Table, copiesRows: true,
				Detail: fmt.Sprintf("ADD CONSTRAINT %s CHECK scans the whole table under ACCESS EXCLUSIVE (a table above the online threshold adds it NOT VALID and validates it under SHARE UPDATE EXCLUSIVE)", c.C.Name),
				Advice: "expected for a small table; on a large one confirm the online threshold sends it to the online recipe"})
		}
	case *schema.AddForeignKey:
		if !hasPhase(phases, tc.Table, ops.PhaseValidate, c.F.Symbol) {
			add(Hazard{Code: CodeTableRewrite, Level: LevelRewrite, Table: tc.Table, copiesRows: true,
				Detail: fmt.Sprintf("ADD CONSTRAINT %s FOREIGN KEY validates every row under SHARE ROW EXCLUSIVE on both tables: their writers wait (a table above the online threshold adds it NOT VALID and validates it under SHARE UPDATE EXCLUSIVE)", c.F.Symbol),
				Advice: "expected for a small table; on a large one confirm the online threshold sends it to the online recipe"})
		}
	case *schema.ModifyIndex:
		if c.Change&^schema.ChangeComment != schema.NoChange && !hasPhase(phases, tc.Table, ops.PhaseSwapIndex, c.To.Name) {
			add(Hazard{Code: CodeIndexNotConc, Level: LevelRewrite, Table: tc.Table, Index: c.To.Name, copiesRows: true,
				Detail: fmt.Sprintf("index %s is redefined (%s) by DROP INDEX and CREATE INDEX inside the reconcile's transaction: writers wait for the whole build (a table at or above the online threshold builds the new definition CONCURRENTLY beside it and swaps it in)", c.To.Name, indexColumns(c.To)),
				Advice: "expected for a small table; on a large one confirm the online threshold (reconcile.WithOnlineAbove) sends it to the CONCURRENTLY path"})
		}
	case *schema.AddPrimaryKey:
		primaryKeyHazard(tc.Table, nil, c.P, phases, add)
	case *schema.ModifyPrimaryKey:
		primaryKeyHazard(tc.Table, c.From, c.To, phases, add)
	case *schema.AddIndex:
		if !builtConcurrently(phases, tc.Table, c.I.Name) {
			add(Hazard{Code: CodeIndexNotConc, Level: LevelRewrite, Table: tc.Table, Index: c.I.Name, copiesRows: true,
				Detail: fmt.Sprintf("index %s (%s) is built inside the reconcile's transaction, without CONCURRENTLY: writers wait for the whole build (tables at or above the online threshold build it CONCURRENTLY)", c.I.Name, indexColumns(c.I)),
				Advice: "expected for a small table; on a large one confirm the online threshold (reconcile.WithOnlineAbove) sends it to the CONCURRENTLY path"})
		}
	}
}

// hasPhase reports a phase of the table with this name about object.
func hasPhase(phases []ops.Phase, table, name, object string) bool {
	for _, ph := range phases {
		if ph.Table == table && ph.Name == name && ph.Object == object {
			return true
		}
	}
	return false
}

// alterScans reports a table whose alter phase scans or rewrites it.
func alterScans(phases []ops.Phase, table string) bool {
	for _, ph := range phases {
		if ph.Table == table && ph.Name == ops.PhaseAlter && ph.Scans {
			return true
		}
	}
	return false
}

// primaryKeyHazard: a primary key added or redefined builds its index
// inside the reconcile's transaction, unless the plan builds it beside the
// table and swaps it in (the swap phase names the key's constraint).
func primaryKeyHazard(table string, from, to *schema.Index, phases []ops.Phase, add func(Hazard)) {
	name := to.Name
	if name == "" && from != nil {
		name = from.Name
	}
	if name == "" {
		name = table + "_pkey"
	}
	if hasPhase(phases, table, ops.PhaseSwapIndex, name) {
		return
	}
	add(Hazard{Code: CodeIndexNotConc, Level: LevelRewrite, Table: table, Index: name, copiesRows: true,
		Detail: fmt.Sprintf("primary key %s (%s) builds its index inside the reconcile's transaction, under ACCESS EXCLUSIVE: readers and writers wait for the whole build (a table at or above the online threshold builds it CONCURRENTLY beside the table and makes it the key)", name, indexColumns(to)),
		Advice: "expected for a small table; on a large one confirm the online threshold (reconcile.WithOnlineAbove) sends it to the CONCURRENTLY path"})
}
