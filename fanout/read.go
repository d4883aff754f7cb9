package fanout

import (
	"context"
	"fmt"
	"strings"

	"github.com/schemastate/schemastate/capture"
	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/instant"
	"github.com/schemastate/schemastate/internal/readonly"
)

// identity renders the row's execution identity as an SQL expression, with
// its bind arguments. One expression serves the rows and the counts, so the
// two cannot classify a row differently.
func (r *reader) identity() (string, []any) {
	if r.since == nil {
		// AC-24b: without execution_since no value is an identity.
		return lit(string(NotAnIdentity)), nil
	}
	// AC-25 (revision 4): a non-sentinel id is real on either side of the
	// key; execution_since only dates the 'unknown' population. AC-24e: the
	// key is bound as a timestamp and compared at the microsecond, and
	// equality lands on the after side (AC-24 point 3).
	return `CASE WHEN agent_execution_id <> ` + lit(capture.UnknownExecution) + ` THEN ` + lit(string(Real)) +
		` WHEN source = ` + lit(SourceBackfill) + ` THEN ` + lit(string(UnrecordedBackfill)) +
		` WHEN ` + instant.AtOrAfter(r.d, "observed_at", "?") + ` THEN ` + lit(string(UnrecordedLive)) +
		` ELSE ` + lit(string(UnrecordedLegacy)) + ` END`, []any{r.since.Arg()}
}

// where renders scope as a WHERE clause ("" for the whole store), with its
// bind arguments.
func where(scope Scope) (string, []any) {
	var conds []string
	var args []any
	if scope.SessionID != "" {
		conds, args = append(conds, "task_session_id = ?"), append(args, scope.SessionID)
	}
	if scope.TaskID != "" {
		conds, args = append(conds, "task_id = ?"), append(args, scope.TaskID)
	}
	if len(conds) == 0 {
		return "", nil
	}
	return " WHERE " + strings.Join(conds, " AND "), args
}

// rows reads scope's rows in the AC-13 order.
func (r *reader) rows(ctx context.Context, scope Scope) ([]Row, error) {
	idExpr, args := r.identity()
	cond, condArgs := where(scope)
	// AC-13: observed_at as an instant, then tool_call_id, then
	// agent_execution_id — total within a session. A task or the whole
	// store spans sessions, which task_session_id orders last; id never does.
	query := `SELECT ` + capture.SelectList + `, ` + idExpr + ` FROM ` + r.from + cond + `
ORDER BY ` + instant.ColumnExpr(r.d, "observed_at") + ` ASC, tool_call_id ASC, agent_execution_id ASC, task_session_id ASC`
	rows, err := r.tx.QueryContext(ctx, r.d.Rebind(query), append(args, condArgs...)...)
	if err != nil {
		return nil, fmt.Errorf("fanout: read rows: %w", err)
	}
	defer rows.Close()
	out := []Row{}
	for rows.Next() {
		var id string
		row, err := capture.ScanRow(rows, &id)
		if err != nil {
			return nil, fmt.Errorf("fanout: read rows: %w", err)
		}
		out = append(out, Row{Row: row, ExecutionIdentity: Identity(id)})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("fanout: read rows: %w", err)
	}
	return out, nil
}

// count fills s's counts for scope: rows per identity and source in one
// grouped scan, then the distinct subagents and real executions.
func (r *reader) count(ctx context.Context, scope Scope, s *Summary) error {
	idExpr, args := r.identity()
	cond, condArgs := where(scope)
	grouped := `SELECT identity, source, COUNT(*) FROM (SELECT ` + idExpr + ` AS identity, source FROM ` + r.from + cond + `) AS classified
GROUP BY identity, source`
	rows, err := r.tx.QueryContext(ctx, r.d.Rebind(grouped), append(args, condArgs...)...)
	if err != nil {
		return fmt.Errorf("fanout: count rows: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, source string
		var n int64
		if err := rows.Scan(&id, &source, &n); err != nil {
			return fmt.Errorf("fanout: count rows: %w", err)
		}
		s.Rows += n
		s.BySource[source] += n
		s.ByIdentity[Identity(id)] += n
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("fanout: count rows: %w", err)
	}

	// AC-25: distinct executions exclude the sentinel; two 'unknown' rows
	// never share an execution.
	realCond := " WHERE agent_execution_id <> " + lit(capture.UnknownExecution)
	if cond != "" {
		realCond += " AND" + strings.TrimPrefix(cond, " WHERE")
	}
	distinct := `SELECT (SELECT COUNT(*) FROM (SELECT DISTINCT task_session_id, tool_call_id FROM ` + r.from + cond + `) AS subagents),
	(SELECT COUNT(DISTINCT agent_execution_id) FROM ` + r.from + realCond + `)`
	var subagents, executions int64
	if err := r.tx.QueryRowContext(ctx, r.d.Rebind(distinct), append(condArgs, condArgs...)...).Scan(&subagents, &executions); err != nil {
		return fmt.Errorf("fanout: count subagents and executions: %w", err)
	}
	s.Subagents = subagents
	if s.Executions != nil {
		s.Executions = &executions
	}
	return nil
}

// tableExists reports whether table exists, resolved as the statements
// resolve it (on PostgreSQL through search_path).
func tableExists(ctx context.Context, q dialect.Querier, d dialect.Dialect, table string) (bool, error) {
	found, err := readonly.TableExists(ctx, q, d, table)
	if err != nil {
		return false, fmt.Errorf("fanout: look up table %s: %w", table, err)
	}
	return found, nil
}

// columnExists reports whether table has column.
func columnExists(ctx context.Context, q dialect.Querier, d dialect.Dialect, table, column string) (bool, error) {
	found, err := readonly.ColumnExists(ctx, q, d, table, column)
	if err != nil {
		return false, fmt.Errorf("fanout: look up column %s.%s: %w", table, column, err)
	}
	return found, nil
}

// lit renders s as an SQL string literal.
func lit(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
