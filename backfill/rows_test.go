package backfill_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/declare"
	"github.com/schemastate/schemastate/internal/instant"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
)

// base is a fixed instant with a full microsecond fraction.
var base = time.Date(2026, 7, 30, 1, 39, 37, 271235000, time.UTC)

// message is one task_session_messages row to seed.
type message struct {
	ID, Session, Task, Turn string
	Created, Updated        time.Time
	// CreatedRaw, when set, is stored verbatim on SQLite instead of Created.
	CreatedRaw string
	// Meta is the metadata text; NoMeta stores NULL.
	Meta   string
	NoMeta bool
}

func seed(t *testing.T, db *dbtest.DB, ms ...message) {
	t.Helper()
	for _, m := range ms {
		_, err := db.DB.Exec(db.Q(`INSERT INTO task_sessions (id, task_id) VALUES (?, ?) ON CONFLICT (id) DO NOTHING`), m.Session, "task-of-"+m.Session)
		require.NoError(t, err)
		if m.Updated.IsZero() {
			m.Updated = m.Created
		}
		var created any = instant.RowTime(db.Dialect, m.Created)
		if m.CreatedRaw != "" && db.Dialect == dialect.SQLite {
			created = m.CreatedRaw
		}
		var meta any = m.Meta
		if m.NoMeta {
			meta = nil
		}
		_, err = db.DB.Exec(db.Q(`INSERT INTO task_session_messages
			(id, task_session_id, task_id, turn_id, content, type, metadata, created_at, updated_at)
			VALUES (?, ?, ?, ?, '', 'tool_call', ?, ?, ?)`),
			m.ID, m.Session, m.Task, m.Turn, meta, created, instant.RowTime(db.Dialect, m.Updated))
		require.NoError(t, err)
	}
}

// subagent renders message metadata for a subagent_task tool call. top holds
// top-level fields besides tool_call_id (e.g. "status"); task holds the fields
// under normalized.subagent_task.
func subagent(toolCallID string, top, task map[string]any) string {
	doc := map[string]any{"normalized": map[string]any{"kind": "subagent_task", "subagent_task": task}}
	if toolCallID != "" {
		doc["tool_call_id"] = toolCallID
	}
	for k, v := range top {
		doc[k] = v
	}
	b, err := json.Marshal(doc)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// columns is task_session_subagents's columns as schema.hcl declares them.
func columns(t *testing.T) []string {
	t.Helper()
	cols, err := declare.Columns(declare.Subagents)
	require.NoError(t, err)
	return cols
}

// row is a stored task_session_subagents row, every column as text (nil = NULL).
type row map[string]*string

func (r row) get(c string) any {
	if r[c] == nil {
		return nil
	}
	return *r[c]
}

// rows returns every row of task_session_subagents keyed by tool_call_id + "/" + agent_execution_id.
func rows(t *testing.T, db *dbtest.DB) map[string]row {
	t.Helper()
	columns := columns(t)
	sel := make([]string, len(columns))
	for i, c := range columns {
		sel[i] = "CAST(" + c + " AS TEXT)"
	}
	out := map[string]row{}
	for _, vals := range dbtest.TextRows(t, db.DB, `SELECT `+strings.Join(sel, ", ")+` FROM task_session_subagents`) {
		r := row{}
		for i, c := range columns {
			if vals[i].Valid {
				v := vals[i].String
				r[c] = &v
			}
		}
		out[*r["tool_call_id"]+"/"+*r["agent_execution_id"]] = r
	}
	return out
}

// stored is how a timestamp this module wrote reads back through CAST(… AS
// TEXT): on SQLite the host's text form exactly, on PostgreSQL the UTC wall clock.
func stored(d dialect.Dialect, tm time.Time) string {
	if d == dialect.SQLite {
		return instant.RowTime(d, tm).(string)
	}
	return tm.UTC().Truncate(time.Microsecond).Format("2006-01-02 15:04:05.999999")
}

func ptr(s string) *string { return &s }

// mapKeys lists the keys of m, in no order.
func mapKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
