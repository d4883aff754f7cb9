package capture_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/capture"
	"github.com/schemastate/schemastate/internal/dbtest"
)

// Ingest streams line by line: a frame far larger than any fixed scanner
// buffer (a 4 MiB result_text) is recorded, the lines around it too, and
// malformed lines are reported by number without stopping the stream.
func TestIngest_StreamsLongLinesAndReportsMalformed(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		s := newStore(t, db)
		big := strings.Repeat("x", 4<<20)
		in := strings.Join([]string{
			`{"session_id":"sess-a","task_id":"task-a","execution_id":"` + execE + `","tool_call_id":"c1","subagent_task":{"tool_use_count":0}}`,
			`{"session_id":"sess-a","task_id":"task-a","execution_id":"` + execE + `","tool_call_id":"c2","subagent_task":{"result_text":"` + big + `","model":"m"}}`,
			`{"session_id":"sess-a"`,
			``,
			`{"session_id":"sess-a","task_id":"task-a","execution_id":"` + execE + `","tool_call_id":"c3","observed_at":"2026-08-03T15:32:20.123456789+02:00","subagent_task":{}}`,
		}, "\n") // no trailing newline: the last line still counts
		var bad []capture.Malformed
		res, err := s.w.Ingest(context.Background(), strings.NewReader(in), func(m capture.Malformed) { bad = append(bad, m) })
		require.NoError(t, err)
		require.Equal(t, 5, res.Lines)
		require.Equal(t, 3, res.Frames)
		require.Equal(t, 1, res.Malformed)
		require.Len(t, bad, 1)
		require.Equal(t, 3, bad[0].Line)
		require.Equal(t, capture.Counters{Attempted: 3, Persisted: 3}, res.Counters)
		require.Equal(t, int64(0), *s.one(t, execE, "c1").ToolUseCount)
		require.Equal(t, "m", *s.one(t, execE, "c2").Model)
		require.Equal(t, "2026-08-03T13:32:20.123456Z", s.one(t, execE, "c3").ObservedAt.Format("2006-01-02T15:04:05.999999Z07:00"),
			"an offset observation is stored as the UTC instant, truncated to the microsecond")
	})
}

// A cancelled context stops the stream and says so.
func TestIngest_StopsOnCancel(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		s := newStore(t, db)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		res, err := s.w.Ingest(ctx, strings.NewReader(`{"session_id":"sess-a","task_id":"task-a","tool_call_id":"c1","subagent_task":{}}`), nil)
		require.ErrorIs(t, err, context.Canceled)
		require.Zero(t, res.Frames)
		require.Equal(t, 0, s.count(t, "1 = 1"))
	})
}
