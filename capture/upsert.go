package capture

import (
	"fmt"
	"slices"
	"strings"

	"github.com/schemastate/schemastate/internal/contract"
)

// columns are the values a frame's row holds, in args() order: what the
// writer can write. The statement lists the columns writers.json's
// "capture" writer names, in its order (upsertFor).
var columns = []string{"id", "task_session_id", "task_id", "turn_id", "agent_execution_id", "tool_call_id",
	"parent_tool_call_id", "subagent_type", "description", "agent_id", "child_session_id",
	"model", "agent_status", "tool_status", "is_async", "total_tokens", "tool_use_count",
	"duration_ms", "source", "observed_at", "settled_at", "updated_at"}

// merge is the conflict clause's rule for each column a later frame may
// change (AC-14): "excluded" is the frame, the table name the stored row.
// A column without a rule is write-once: id, task_session_id,
// agent_execution_id and tool_call_id (the key, AC-30), task_id (AC-5),
// source and observed_at (AC-1, AC-1a).
var merge = map[string]string{
	// AC-2a: first non-empty turn wins; a stored NULL is filled forward.
	"turn_id": "COALESCE(" + Table + ".turn_id, excluded.turn_id)",
	// AC-4/AC-5: a reported value replaces, an absent one (NULL) never blanks.
	"parent_tool_call_id": "COALESCE(excluded.parent_tool_call_id, " + Table + ".parent_tool_call_id)",
	"subagent_type":       "COALESCE(excluded.subagent_type, " + Table + ".subagent_type)",
	"description":         "COALESCE(excluded.description, " + Table + ".description)",
	"agent_id":            "COALESCE(excluded.agent_id, " + Table + ".agent_id)",
	"child_session_id":    "COALESCE(excluded.child_session_id, " + Table + ".child_session_id)",
	"model":               "COALESCE(excluded.model, " + Table + ".model)",
	"agent_status":        "COALESCE(excluded.agent_status, " + Table + ".agent_status)",
	// AC-12: once settled, tool_status stays the terminal value; before,
	// AC-5. settled_at marks settlement: every writer sets it together with
	// the first terminal tool_status (AC-11 here, AC-23a in the backfill). A
	// stored terminal status freezes too, so a row from an older writer that
	// left settled_at NULL is never unsettled by a late non-terminal frame.
	"tool_status": "CASE WHEN " + Table + ".settled_at IS NOT NULL OR " + Table + ".tool_status IN (" + terminalList + ") THEN " + Table + ".tool_status\n\t\tELSE COALESCE(excluded.tool_status, " + Table + ".tool_status) END",
	// AC-11: write-once at the first terminal observation.
	"settled_at": "COALESCE(" + Table + ".settled_at, excluded.settled_at)",
	// Sticky: set on a positive report, never back to 0.
	"is_async": "CASE WHEN excluded.is_async = 1 THEN 1 ELSE " + Table + ".is_async END",
	// AC-7a, AC-9: zero (tokens, duration) and negative metrics arrive as
	// NULL, so they never blank a learned measurement (AC-4).
	"total_tokens":   "COALESCE(excluded.total_tokens, " + Table + ".total_tokens)",
	"tool_use_count": "COALESCE(excluded.tool_use_count, " + Table + ".tool_use_count)",
	"duration_ms":    "COALESCE(excluded.duration_ms, " + Table + ".duration_ms)",
	"updated_at":     "excluded.updated_at",
}

// upsert is a writer's one statement per frame (AC-14) and, for each of
// its placeholders, the index in args() of the value it binds.
type upsert struct {
	sql   string
	order []int
	// identity: the placeholders take args() as it is (this release's own
	// writer), so bind copies nothing.
	identity bool
}

// upsertFor builds the statement a writer of the contract sends: its insert
// columns, its conflict target, and the merge rule of each column it
// updates. A column the contract names that a row has no value for, or
// updates without a rule, is an error: the contract and this code disagree.
func upsertFor(w *contract.Writer) (upsert, error) {
	if w.Table != Table {
		return upsert{}, fmt.Errorf("writer %q writes %s, not %s", w.Name, w.Table, Table)
	}
	var u upsert
	for _, c := range w.Insert {
		i := slices.Index(columns, c)
		if i < 0 {
			return upsert{}, fmt.Errorf("writer %q inserts %s, which a frame's row has no value for", w.Name, c)
		}
		u.order = append(u.order, i)
	}
	set := make([]string, 0, len(w.Update))
	for _, c := range w.Update {
		rule, ok := merge[c]
		if !ok {
			return upsert{}, fmt.Errorf("writer %q updates %s, which has no merge rule", w.Name, c)
		}
		set = append(set, "\t"+c+" = "+rule)
	}
	u.sql = "INSERT INTO " + Table + " (" + strings.Join(w.Insert, ", ") + ")\nVALUES (" +
		strings.TrimSuffix(strings.Repeat("?, ", len(w.Insert)), ", ") + ")"
	switch {
	case len(w.Conflict) == 0:
	case len(set) == 0:
		u.sql += "\nON CONFLICT (" + strings.Join(w.Conflict, ", ") + ") DO NOTHING"
	default:
		u.sql += "\nON CONFLICT (" + strings.Join(w.Conflict, ", ") + ") DO UPDATE SET\n" + strings.Join(set, ",\n")
	}
	u.identity = slices.Equal(w.Insert, columns)
	return u, nil
}

// bind orders a row's values as the statement's placeholders take them.
func (u upsert) bind(values []any) []any {
	if u.identity {
		return values
	}
	out := make([]any, len(u.order))
	for i, j := range u.order {
		out[i] = values[j]
	}
	return out
}
