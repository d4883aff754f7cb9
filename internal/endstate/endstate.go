// Package endstate reads AC-33's end state off a task_session_subagents
// table: the facts (clauses 1–3) that make agent_execution_id a real
// execution identity, and whether the declared indexes are present (clause 4).
package endstate

import (
	"slices"
	"strings"

	"ariga.io/atlas/sql/schema"

	"github.com/schemastate/schemastate/internal/describe"
)

// The table, key and columns AC-33 speaks about.
const (
	Table           = "task_session_subagents"
	ExecutionColumn = "agent_execution_id"
	SessionColumn   = "task_session_id"
	ToolCallColumn  = "tool_call_id"
)

// Facts are AC-33's clauses as observed (reconcile.EndState is the same
// facts as a host reads them).
type Facts struct {
	ExecutionColumnNotNull  bool
	ThreeColumnUnique       bool
	TwoColumnUniqueAbsent   bool
	IndexesMatchDeclaration bool
}

// KeyBearing reports AC-33 clauses 1–3.
func (e Facts) KeyBearing() bool {
	return e.ExecutionColumnNotNull && e.ThreeColumnUnique && e.TwoColumnUniqueAbsent
}

// Missing names each AC-33 clause (1–3) the end state lacks, in clause order.
func (e Facts) Missing() []string {
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

// Observe reads the end state off an inspected live table (nil when the table
// does not exist). Uniqueness is recognised in every form it can take: an
// inline constraint (SQLite autoindex), a named unique index, or a PostgreSQL
// UNIQUE constraint — all inspect as unique indexes.
func Observe(live, want *schema.Table) Facts {
	if live == nil {
		return Facts{}
	}
	var e Facts
	if c, ok := live.Column(ExecutionColumn); ok && !c.Type.Null {
		e.ExecutionColumnNotNull = true
	}
	three := []string{SessionColumn, ExecutionColumn, ToolCallColumn}
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
		if len(cols) == 2 && slices.Contains(cols, SessionColumn) && slices.Contains(cols, ToolCallColumn) {
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

// Usable is live without the indexes, checks and foreign keys unusable
// names: what the server holds under a name but no statement can use as
// what it declares — on PostgreSQL an INVALID index (a concurrent build
// that failed or is under way; an upsert naming its columns fails with
// 42P10), a NOT VALID constraint, a DEFERRABLE unique (no ON CONFLICT
// arbiter). None of them counts for a clause: the end state is what holds.
// live is left as it was.
func Usable(live *schema.Table, unusable map[string]bool) *schema.Table {
	if live == nil || len(unusable) == 0 {
		return live
	}
	t := *live
	t.Indexes = slices.DeleteFunc(slices.Clone(live.Indexes), func(idx *schema.Index) bool { return unusable[idx.Name] })
	t.ForeignKeys = slices.DeleteFunc(slices.Clone(live.ForeignKeys), func(fk *schema.ForeignKey) bool { return unusable[fk.Symbol] })
	t.Attrs = slices.DeleteFunc(slices.Clone(live.Attrs), func(a schema.Attr) bool {
		c, ok := a.(*schema.Check)
		return ok && unusable[c.Name]
	})
	return &t
}
