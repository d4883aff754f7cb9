package capture

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
)

// The statement is built from writers.json's "capture" writer, and the
// code and the contract name the same columns: every value a frame's row
// holds is inserted, every column with a merge rule is updated and every
// updated column has one. A column added to one side and not the other
// fails here.
func TestContract_StatementAndCodeNameTheSameColumns(t *testing.T) {
	w := dbtest.BuiltinWriter(t, "capture")
	u, err := upsertFor(w)
	require.NoError(t, err)
	require.ElementsMatch(t, columns, w.Insert, "the row's values and the contract's insert list")
	var rules []string
	for c := range merge {
		rules = append(rules, c)
	}
	require.ElementsMatch(t, rules, w.Update, "the merge rules and the contract's update list")
	require.True(t, u.identity, "this release's writer binds its row as it is")
	require.Contains(t, u.sql, "ON CONFLICT (task_session_id, agent_execution_id, tool_call_id) DO UPDATE SET")

	// A contract naming a column the row has no value for, or updating one
	// without a rule, is refused rather than sent.
	extra := *w
	extra.Insert = append(slices.Clone(w.Insert), "priority")
	_, err = upsertFor(&extra)
	require.ErrorContains(t, err, "priority")
	extra = *w
	extra.Update = append(slices.Clone(w.Update), "task_id")
	_, err = upsertFor(&extra)
	require.ErrorContains(t, err, "task_id")
}

// contractFrames are the corpus (testdata/frames) and edge frames that
// reach every bound the contract states: no turn, no status, zero and
// negative metrics, a reported zero tool-use count, a terminal status.
func contractFrames(t *testing.T) []Frame {
	t.Helper()
	f, err := os.Open("../testdata/frames/stream.ndjson")
	require.NoError(t, err)
	defer f.Close()
	var out []Frame
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		// The corpus holds a truncated line on purpose (ingest reports it).
		if fr, err := ParseFrame(sc.Bytes()); err == nil {
			out = append(out, fr)
		}
	}
	require.NoError(t, sc.Err())
	require.Greater(t, len(out), 30, "the corpus was read")
	zero, neg := 0, -3
	base := Frame{SessionID: "s", TaskID: "k", ToolCallID: "tc"}
	for _, p := range []SubagentTask{
		{}, {ToolUseCount: &zero}, {ToolUseCount: &neg, TotalTokens: -1, DurationMs: -1},
		{TotalTokens: 1, DurationMs: 1, IsAsync: true}, {ChildSessionID: "child"},
	} {
		fr := base
		fr.Subagent = p
		out = append(out, fr)
	}
	done := base
	done.ToolStatus, done.TurnID, done.ExecutionID = "completed", "turn", "exec"
	return append(out, done)
}

// What the row holds for every frame keeps the contract's bounds: a column
// it says is never NULL never is, values stay in their set and above their
// least value; and each NULL the contract allows is one some frame writes,
// so the contract says no more than the code does.
func TestContract_RowsKeepTheContractsBounds(t *testing.T) {
	cw := dbtest.BuiltinWriter(t, "capture")
	for _, d := range []dialect.Dialect{dialect.SQLite, dialect.Postgres} {
		w := &Writer{d: d, now: func() time.Time { return time.Unix(1e9, 0) }}
		sawNull := map[string]bool{}
		for _, f := range contractFrames(t) {
			if f.SessionID == "" || f.TaskID == "" || f.ToolCallID == "" {
				continue // AC-2: skipped before any row is made
			}
			values := w.row(f).args()
			for i, name := range columns {
				c := cw.Column(name)
				require.NotNil(t, c, name)
				v := values[i]
				if v == nil {
					require.NotEmpty(t, c.Null, "%s: the writer wrote NULL where the contract says it never does (frame %+v)", name, f)
					sawNull[name] = true
					continue
				}
				text := fmt.Sprint(v)
				if len(c.Values) > 0 {
					require.Contains(t, c.Values, text, name)
				}
				if s, ok := v.(string); ok && s == "" {
					require.NotEmpty(t, c.Empty, "%s: '' where the contract says never", name)
				}
				if c.Min != nil {
					n, err := strconv.ParseInt(text, 10, 64)
					require.NoError(t, err, name)
					require.GreaterOrEqual(t, n, *c.Min, name)
				}
			}
		}
		for _, c := range cw.Columns {
			if c.Null != "" {
				require.True(t, sawNull[c.Name], "%s: the contract allows NULL, and no frame writes one", c.Name)
			}
		}
	}
}
