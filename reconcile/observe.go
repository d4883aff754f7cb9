package reconcile

import (
	"context"
	"database/sql"

	"ariga.io/atlas/sql/schema"

	"github.com/schemastate/schemastate/internal/declare"
	"github.com/schemastate/schemastate/internal/endstate"
	"github.com/schemastate/schemastate/reconcile/internal/core"
)

// The table, key and columns AC-33 speaks about.
const (
	subagentsTable  = endstate.Table
	executionColumn = endstate.ExecutionColumn
	sessionColumn   = endstate.SessionColumn
	toolCallColumn  = endstate.ToolCallColumn
)

// EndState is AC-33's end state as observed on the live schema. Clauses 1–3
// are key-bearing (AC-33b); clause 4 is reported but never gates the key.
type EndState struct {
	ExecutionColumnNotNull  bool `json:"execution_column_not_null"`
	ThreeColumnUnique       bool `json:"three_column_unique"`
	TwoColumnUniqueAbsent   bool `json:"two_column_unique_absent"`
	IndexesMatchDeclaration bool `json:"indexes_match_declaration"`
}

// KeyBearing reports AC-33 clauses 1–3: the facts that make
// agent_execution_id a real execution identity.
func (e EndState) KeyBearing() bool { return endstate.Facts(e).KeyBearing() }

// Missing names each AC-33 clause (1–3) the end state lacks, in clause order.
func (e EndState) Missing() []string { return endstate.Facts(e).Missing() }

// observeEndState inspects task_session_subagents and reads AC-33's end
// state off it as the end state sees it (driver.observable): what the
// execution_since step writes its key from and what status reports. seen,
// when not nil, is given the inspection of every owned table: status takes
// its index sets there. Without it no other table is inspected, since the
// end state is that one table's (on SQLite a full-check boot's re-inspection
// of the other owned table was a tenth of its fixed cost).
func observeEndState(ctx context.Context, drv core.Driver, q core.Querier, decl *declare.Declaration, schemaName string, seen func(live *schema.Schema)) (EndState, error) {
	var only []string
	if seen == nil {
		only = []string{subagentsTable}
	}
	_, live, err := inspectLive(ctx, drv, q, decl, schemaName, only...)
	if err != nil {
		return EndState{}, err
	}
	if seen != nil {
		seen(live)
	}
	lt, _ := live.Table(subagentsTable)
	if lt, err = drv.Observable(ctx, q, lt); err != nil {
		return EndState{}, err
	}
	return observe(lt, decl.Table(subagentsTable)), nil
}

// observe reads the end state off an inspected live table (endstate.Observe).
func observe(live, want *schema.Table) EndState { return EndState(endstate.Observe(live, want)) }

// Plan is the dry run of the shape step: what Reconcile would execute now.
// It takes no lock and changes nothing.
func Plan(ctx context.Context, db *sql.DB, opts ...Option) (*ShapePlan, error) {
	o, drv, name, decl, err := readOnly(ctx, db, opts)
	if err != nil {
		return nil, err
	}
	p, err := planShape(ctx, drv, db, decl, name, o)
	if err != nil {
		return nil, err
	}
	if p.MissingHostTables, err = missingTables(ctx, drv, db, decl.HostTables()); err != nil {
		return nil, err
	}
	return p, nil
}

// readOnly prepares a lock-free, read-only look (Plan, Observe): the options,
// the driver, the live schema's name and the declaration evaluated for it.
func readOnly(ctx context.Context, db *sql.DB, opts []Option) (*options, core.Driver, string, *declare.Declaration, error) {
	o, drv, err := newOptions(ctx, db, opts)
	if err != nil {
		return nil, nil, "", nil, err
	}
	name, err := drv.SchemaName(ctx, db)
	if err != nil {
		return nil, nil, "", nil, err
	}
	decl, err := o.loadDeclaration(drv, name)
	if err != nil {
		return nil, nil, "", nil, err
	}
	return o, drv, name, decl, nil
}
