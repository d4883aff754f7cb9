package transcript

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/instant"
)

// LifecycleTable is the host's lifecycle summary of background executions,
// declared in schema.hcl.
const LifecycleTable = "background_agent_log"

// Identity names one background execution's lifecycle row.
type Identity struct {
	WorkspacePath string `json:"workspace_path"`
	SessionID     string `json:"session_id"`
	AgentID       string `json:"agent_id"`
}

// Entry is one background_agent_log row. Empty strings are NULL in the table.
type Entry struct {
	WorkspacePath string     `json:"workspace_path"`
	SessionID     string     `json:"session_id"`
	AgentID       string     `json:"agent_id"`
	ExecutionID   string     `json:"execution_id,omitempty"`
	Kind          string     `json:"kind"`
	Provider      string     `json:"provider,omitempty"`
	Model         string     `json:"model,omitempty"`
	Status        string     `json:"status"`
	StartedAt     time.Time  `json:"started_at"`
	CompletedAt   *time.Time `json:"completed_at,omitempty"`
	Error         string     `json:"error,omitempty"`
	// TranscriptPath and TranscriptStatus are "" when NULL: nothing was ever
	// recorded, which is not the same as "ok".
	TranscriptPath   string `json:"transcript_path,omitempty"`
	TranscriptStatus string `json:"transcript_status,omitempty"`
}

// Alive reports whether the lifecycle table says the execution may still be
// running: its status is not one of the four terminal statuses. An unknown
// status counts as alive, so nothing is ever finished on a guess.
func (e Entry) Alive() bool { return !Status(e.Status).Terminal() }

// Lifecycle reads and writes background_agent_log on SQLite or PostgreSQL.
// It holds no state besides the database handle.
type Lifecycle struct {
	q dialect.Querier
	d dialect.Dialect
}

// NewLifecycle wraps db (whose dialect is detected).
func NewLifecycle(db *sql.DB) (*Lifecycle, error) {
	d, err := dialect.Detect(db)
	if err != nil {
		return nil, err
	}
	return &Lifecycle{q: db, d: d}, nil
}

// Check verifies background_agent_log is there with every column this
// package reads, so a missing table is an error even when nothing else would
// have queried it.
func (l *Lifecycle) Check(ctx context.Context) error {
	rows, err := l.q.QueryContext(ctx, `SELECT `+entryColumns+` FROM background_agent_log WHERE 1 = 0`)
	if err != nil {
		return fmt.Errorf("%s: %w", LifecycleTable, err)
	}
	return rows.Close()
}

const terminalList = "('completed', 'failed', 'cancelled', 'timed_out')"

// The lifecycle writer's statements: what writers.json's "transcript" writer
// says they write (TestLifecycle_StatementsAreTheContracts holds them equal).
const (
	// startSQL: a row already there (the host may write it first) is left
	// exactly as it is.
	startSQL = `INSERT INTO background_agent_log
		(workspace_path, session_id, agent_id, execution_id, kind, provider, model, status, started_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (workspace_path, session_id, agent_id) DO NOTHING`
	endSQL = `UPDATE background_agent_log
		SET status = ?, completed_at = ?, error = ?, model = COALESCE(model, ?)
		WHERE workspace_path = ? AND session_id = ? AND agent_id = ? AND status NOT IN ` + terminalList
	// recordTranscriptSQL keeps the first error (requirement 5).
	recordTranscriptSQL = `UPDATE background_agent_log
		SET transcript_path = COALESCE(?, transcript_path), transcript_status = ?
		WHERE workspace_path = ? AND session_id = ? AND agent_id = ?
		  AND (transcript_status IS NULL OR transcript_status = 'ok')`
)

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return dbText(s)
}

// dbText is s as a text column can hold it on both dialects: PostgreSQL
// refuses NUL and bytes that are not UTF-8 (and would fail the whole write),
// so each such byte is spelled \xHH. Clean text is unchanged.
func dbText(s string) string {
	if utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == 0 || r == utf8.RuneError && n == 1 {
			fmt.Fprintf(&b, `\x%02x`, s[i])
			i++
			continue
		}
		b.WriteString(s[i : i+n])
		i += n
	}
	return b.String()
}

// Start inserts the row for a new execution with its lifecycle fields. A row
// already there (the host may write it first) is left exactly as it is.
func (l *Lifecycle) Start(ctx context.Context, e Entry) error {
	if e.Status == "" {
		e.Status = string(Running)
	}
	_, err := l.q.ExecContext(ctx, l.d.Rebind(startSQL),
		dbText(e.WorkspacePath), dbText(e.SessionID), dbText(e.AgentID), nullable(e.ExecutionID), dbText(e.Kind),
		nullable(e.Provider), nullable(e.Model), dbText(e.Status), instant.RowTime(l.d, e.StartedAt))
	if err != nil {
		return fmt.Errorf("%s: start %s/%s: %w", LifecycleTable, e.SessionID, e.AgentID, err)
	}
	return nil
}

// End moves a running row to a terminal status, once: a row already terminal
// is left alone. It reports whether it changed the row.
func (l *Lifecycle) End(ctx context.Context, id Identity, status Status, at time.Time, errText string) (bool, error) {
	return l.end(ctx, id, status, at, errText, "")
}

// end is End that also records model — the model the provider stream
// reported — in a row that has none: a model the host gave is never
// overwritten. Status and model change in one statement.
func (l *Lifecycle) end(ctx context.Context, id Identity, status Status, at time.Time, errText, model string) (bool, error) {
	res, err := l.q.ExecContext(ctx, l.d.Rebind(endSQL),
		string(status), instant.RowTime(l.d, at), nullable(errText), nullable(model),
		dbText(id.WorkspacePath), dbText(id.SessionID), dbText(id.AgentID))
	if err != nil {
		return false, fmt.Errorf("%s: end %s/%s: %w", LifecycleTable, id.SessionID, id.AgentID, err)
	}
	n, err := res.RowsAffected()
	return n > 0, err
}

// RecordTranscript records a transcript operation's outcome (statusText) and
// the transcript's path. The first error is kept: neither 'ok' nor a later
// error overwrites an 'error: …', because a transcript that once missed a
// write is never again fully auditable (requirement 5).
func (l *Lifecycle) RecordTranscript(ctx context.Context, id Identity, path, status string) error {
	res, err := l.q.ExecContext(ctx, l.d.Rebind(recordTranscriptSQL),
		nullable(path), dbText(status), dbText(id.WorkspacePath), dbText(id.SessionID), dbText(id.AgentID))
	if err != nil {
		return fmt.Errorf("%s: record transcript status of %s/%s: %w", LifecycleTable, id.SessionID, id.AgentID, err)
	}
	// No row changed: either an earlier error is kept, or there is no row
	// to record in — which must not pass for recorded.
	if n, err := res.RowsAffected(); err == nil && n == 0 {
		e, err := l.Get(ctx, id)
		if err != nil {
			return err
		}
		if e == nil {
			return fmt.Errorf("no %s row for workspace %q session %q agent %q; outcome %q not recorded",
				LifecycleTable, id.WorkspacePath, id.SessionID, id.AgentID, status)
		}
	}
	return nil
}

const entryColumns = `workspace_path, session_id, agent_id, execution_id, kind, provider, model, status,
	started_at, completed_at, error, transcript_path, transcript_status`

// Get returns the row for id, or nil when there is none.
func (l *Lifecycle) Get(ctx context.Context, id Identity) (*Entry, error) {
	es, err := l.query(ctx, `WHERE workspace_path = ? AND session_id = ? AND agent_id = ?`, id.WorkspacePath, id.SessionID, id.AgentID)
	if err != nil || len(es) == 0 {
		return nil, err
	}
	return &es[0], nil
}

// Find returns the rows of (session, agent) in every workspace, or in one
// when workspace is not "", ordered by workspace path (Recover's reasons
// name them in that order).
func (l *Lifecycle) Find(ctx context.Context, workspace, session, agent string) ([]Entry, error) {
	if workspace != "" {
		return l.query(ctx, `WHERE workspace_path = ? AND session_id = ? AND agent_id = ?`, workspace, session, agent)
	}
	return l.query(ctx, `WHERE session_id = ? AND agent_id = ? ORDER BY workspace_path`, session, agent)
}

// List returns a parent session's rows (in one workspace when workspace is
// not ""), ordered by agent id.
func (l *Lifecycle) List(ctx context.Context, workspace, session string) ([]Entry, error) {
	if workspace != "" {
		return l.query(ctx, `WHERE workspace_path = ? AND session_id = ? ORDER BY agent_id, workspace_path`, workspace, session)
	}
	return l.query(ctx, `WHERE session_id = ? ORDER BY agent_id, workspace_path`, session)
}

func (l *Lifecycle) query(ctx context.Context, where string, args ...any) ([]Entry, error) {
	for i, a := range args {
		if s, ok := a.(string); ok {
			args[i] = dbText(s)
		}
	}
	rows, err := l.q.QueryContext(ctx, l.d.Rebind(`SELECT `+entryColumns+` FROM background_agent_log `+where), args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", LifecycleTable, err)
	}
	defer rows.Close()
	var out []Entry
	for rows.Next() {
		var (
			e                                  Entry
			exec, prov, model, errText, tp, ts sql.NullString
			started, completed                 any
		)
		if err := rows.Scan(&e.WorkspacePath, &e.SessionID, &e.AgentID, &exec, &e.Kind, &prov, &model, &e.Status,
			&started, &completed, &errText, &tp, &ts); err != nil {
			return nil, fmt.Errorf("%s: %w", LifecycleTable, err)
		}
		e.ExecutionID, e.Provider, e.Model, e.Error = exec.String, prov.String, model.String, errText.String
		e.TranscriptPath, e.TranscriptStatus = tp.String, ts.String
		if e.StartedAt, err = scanTime(started); err != nil {
			return nil, err
		}
		if completed != nil {
			t, err := scanTime(completed)
			if err != nil {
				return nil, err
			}
			e.CompletedAt = &t
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// scanTime reads a timestamp column: a time.Time (PostgreSQL, or SQLite when
// the driver parses it) or the host's SQLite text form.
func scanTime(v any) (time.Time, error) {
	var s string
	switch v := v.(type) {
	case time.Time:
		return v.UTC(), nil
	case string:
		s = v
	case []byte:
		s = string(v)
	default:
		return time.Time{}, fmt.Errorf("%s: unexpected timestamp value %T", LifecycleTable, v)
	}
	s = strings.TrimSpace(s)
	for _, layout := range []string{"2006-01-02 15:04:05.999999999-07:00", "2006-01-02 15:04:05.999999999", time.RFC3339Nano} {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("%s: timestamp %q in no known form", LifecycleTable, s)
}
