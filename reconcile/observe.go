package reconcile

import (
	"context"
	"database/sql"
	"slices"
	"strings"

	"ariga.io/atlas/sql/schema"

	"github.com/schemastate/schemastate/internal/describe"
)

// The table, key and columns AC-33 speaks about.
const (
	subagentsTable  = "task_session_subagents"
	executionColumn = "agent_execution_id"
	sessionColumn   = "task_session_id"
	toolCallColumn  = "tool_call_id"
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
func (e EndState) KeyBearing() bool {
	return e.ExecutionColumnNotNull && e.ThreeColumnUnique && e.TwoColumnUniqueAbsent
}

// EndState is AC-33's end state of the declared task_session_subagents
// itself: what a store reconciled to this declaration observes, and so
// whether a reconcile to it writes execution_since (clauses 1–3).
func (d *Declaration) EndState() EndState {
	t := d.Table(subagentsTable)
	return observe(t, t)
}

// Missing names each AC-33 clause (1–3) the end state lacks, in clause order.
func (e EndState) Missing() []string {
	var m []string
	if !e.ExecutionColumnNotNull {
		m = append(m, "agent_execution_id NOT NULL column absent")
	}
	if !e.ThreeColumnUnique {
		m = append(m, "UNIQUE(task_session_id, agent_execution_id, tool_call_id) absent")
	}
	if !e.TwoColumnUniqueAbsent {
		m = append(m, "two-column UNIQUE(task_session_id, tool_call_id) still present")
	}
	return m
}

// observe reads the end state off an inspected live table (nil when the table
// does not exist). Uniqueness is recognised in every form it can take: an
// inline constraint (SQLite autoindex), a named unique index, or a PostgreSQL
// UNIQUE constraint — all inspect as unique indexes.
func observe(live, want *schema.Table) EndState {
	if live == nil {
		return EndState{}
	}
	var e EndState
	if c, ok := live.Column(executionColumn); ok && !c.Type.Null {
		e.ExecutionColumnNotNull = true
	}
	three := []string{sessionColumn, executionColumn, toolCallColumn}
	e.TwoColumnUniqueAbsent = true
	for _, idx := range live.Indexes {
		if !idx.Unique {
			continue
		}
		cols := describe.ColumnNames(idx)
		// Clause 2 is uniqueness over every row: a partial index enforces
		// nothing outside its predicate and is no ON CONFLICT target. (A
		// partial two-column unique still blocks rows, so it still counts.)
		if slices.Equal(cols, three) && !describe.IsPartial(idx) {
			e.ThreeColumnUnique = true
		}
		if len(cols) == 2 && slices.Contains(cols, sessionColumn) && slices.Contains(cols, toolCallColumn) {
			e.TwoColumnUniqueAbsent = false
		}
	}
	e.IndexesMatchDeclaration = want != nil && declaredIndexesPresent(live, want)
	return e
}

// declaredIndexesPresent is clause 4: every declared index is present live as
// declared — name, uniqueness, columns in order with their direction, no
// predicate. A declared unique may instead be present as the inline UNIQUE
// (…) a host's own CREATE TABLE writes (SQLite's autoindex): the same
// uniqueness, which SQLite lets nobody name (normalizeLive reads it the same
// way). Indexes the declaration does not name are not clause 4's business:
// undeclared ones are drift, reported and kept (drift.go); a retired key is
// clause 3's.
func declaredIndexesPresent(live, want *schema.Table) bool {
	for _, w := range want.Indexes {
		l, ok := live.Index(w.Name)
		if !ok && w.Unique {
			for _, idx := range live.Indexes {
				if strings.HasPrefix(idx.Name, "sqlite_autoindex_") && describe.SameIndex(idx, w) {
					l, ok = idx, true
				}
			}
		}
		if !ok || !describe.SameIndex(l, w) {
			return false
		}
	}
	return true
}

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
func readOnly(ctx context.Context, db *sql.DB, opts []Option) (*options, driver, string, *Declaration, error) {
	o, drv, err := newOptions(ctx, db, opts)
	if err != nil {
		return nil, nil, "", nil, err
	}
	name, err := drv.schemaName(ctx, db)
	if err != nil {
		return nil, nil, "", nil, err
	}
	decl, err := o.loadDeclaration(drv, name)
	if err != nil {
		return nil, nil, "", nil, err
	}
	return o, drv, name, decl, nil
}
