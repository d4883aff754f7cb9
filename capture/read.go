package capture

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/instant"
)

// Row is one stored subagent context. Nullable columns are pointers; nil is
// NULL ("not reported", never zero).
type Row struct {
	ID               string     `json:"id"`
	TaskSessionID    string     `json:"task_session_id"`
	TaskID           string     `json:"task_id"`
	TurnID           *string    `json:"turn_id"`
	AgentExecutionID string     `json:"agent_execution_id"`
	ToolCallID       string     `json:"tool_call_id"`
	ParentToolCallID *string    `json:"parent_tool_call_id"`
	SubagentType     *string    `json:"subagent_type"`
	Description      *string    `json:"description"`
	AgentID          *string    `json:"agent_id"`
	ChildSessionID   *string    `json:"child_session_id"`
	Model            *string    `json:"model"`
	AgentStatus      *string    `json:"agent_status"`
	ToolStatus       *string    `json:"tool_status"`
	IsAsync          bool       `json:"is_async"`
	TotalTokens      *int64     `json:"total_tokens"`
	ToolUseCount     *int64     `json:"tool_use_count"`
	DurationMs       *int64     `json:"duration_ms"`
	Source           string     `json:"source"`
	ObservedAt       time.Time  `json:"observed_at"`
	SettledAt        *time.Time `json:"settled_at"`
	UpdatedAt        time.Time  `json:"updated_at"`
}

// ListBySession returns a session's subagent contexts in the AC-13 order.
func ListBySession(ctx context.Context, q dialect.Querier, d dialect.Dialect, sessionID string) ([]Row, error) {
	return list(ctx, q, d, "task_session_id", sessionID)
}

// ListByTurn returns a turn's subagent contexts in the AC-13 order.
func ListByTurn(ctx context.Context, q dialect.Querier, d dialect.Dialect, turnID string) ([]Row, error) {
	return list(ctx, q, d, "turn_id", turnID)
}

func list(ctx context.Context, q dialect.Querier, d dialect.Dialect, col, val string) ([]Row, error) {
	// AC-13: observed_at, then tool_call_id, then agent_execution_id — a total
	// order within a session, since the last two complete the unique key. id
	// is never a tiebreak. observed_at is compared as an instant (on SQLite
	// its stored text is normalized to one fixed-width UTC form first).
	query := `SELECT ` + SelectList + ` FROM ` + Table + ` WHERE ` + col + ` = ?
ORDER BY ` + instant.ColumnExpr(d, "observed_at") + ` ASC, tool_call_id ASC, agent_execution_id ASC`
	rows, err := q.QueryContext(ctx, d.Rebind(query), val)
	if err != nil {
		return nil, fmt.Errorf("capture: list by %s: %w", col, err)
	}
	defer rows.Close()
	out := []Row{}
	for rows.Next() {
		r, err := ScanRow(rows)
		if err != nil {
			return nil, fmt.Errorf("capture: list by %s: %w", col, err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("capture: list by %s: %w", col, err)
	}
	return out, nil
}

// SelectList is the column list ScanRow reads, in its order: a reader that
// selects more than a Row (a classification, a count) appends its own
// expressions after it.
var SelectList = strings.Join(columns, ", ")

// ScanRow reads the current row of rows, selected as SelectList followed by
// one expression per extra destination, into a Row and extra.
func ScanRow(rows *sql.Rows, extra ...any) (Row, error) {
	var (
		r                                            Row
		turn, parent, typ, desc, agent, child, model sql.NullString
		agentStatus, toolStatus                      sql.NullString
		isAsync                                      int64
		tokens, count, duration                      sql.NullInt64
		observed, settled, updated                   any
	)
	dest := append([]any{&r.ID, &r.TaskSessionID, &r.TaskID, &turn, &r.AgentExecutionID, &r.ToolCallID,
		&parent, &typ, &desc, &agent, &child, &model, &agentStatus, &toolStatus, &isAsync,
		&tokens, &count, &duration, &r.Source, &observed, &settled, &updated}, extra...)
	err := rows.Scan(dest...)
	if err != nil {
		return Row{}, err
	}
	r.TurnID, r.ParentToolCallID, r.SubagentType = str(turn), str(parent), str(typ)
	r.Description, r.AgentID, r.ChildSessionID = str(desc), str(agent), str(child)
	r.Model, r.AgentStatus, r.ToolStatus = str(model), str(agentStatus), str(toolStatus)
	r.IsAsync = isAsync != 0
	r.TotalTokens, r.ToolUseCount, r.DurationMs = i64(tokens), i64(count), i64(duration)
	if r.ObservedAt, err = timeValue(observed); err != nil {
		return Row{}, fmt.Errorf("observed_at: %w", err)
	}
	if r.UpdatedAt, err = timeValue(updated); err != nil {
		return Row{}, fmt.Errorf("updated_at: %w", err)
	}
	if settled != nil {
		t, err := timeValue(settled)
		if err != nil {
			return Row{}, fmt.Errorf("settled_at: %w", err)
		}
		r.SettledAt = &t
	}
	return r, nil
}

func str(n sql.NullString) *string {
	if !n.Valid {
		return nil
	}
	return &n.String
}

func i64(n sql.NullInt64) *int64 {
	if !n.Valid {
		return nil
	}
	return &n.Int64
}

// storedLayouts are the text forms a SQLite TIMESTAMP column holds: the
// host's form first (host-context.md), then the ones other writers produce.
var storedLayouts = []string{
	"2006-01-02 15:04:05.999999999-07:00",
	"2006-01-02 15:04:05.999999999Z07:00",
	"2006-01-02T15:04:05.999999999Z07:00",
	"2006-01-02 15:04:05.999999999",
	"2006-01-02T15:04:05.999999999",
}

// timeValue reads a scanned timestamp column as a UTC instant.
func timeValue(v any) (time.Time, error) {
	switch x := v.(type) {
	case time.Time:
		// PostgreSQL's timestamp (UTC wall clock) scans as UTC; modernc parses
		// SQLite's stored text with its offset.
		return x.UTC(), nil
	case []byte:
		return parseStored(string(x))
	case string:
		return parseStored(x)
	default:
		return time.Time{}, fmt.Errorf("unexpected %T", v)
	}
}

func parseStored(s string) (time.Time, error) {
	for _, l := range storedLayouts {
		if t, err := time.Parse(l, s); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("unrecognised timestamp %q", s)
}
