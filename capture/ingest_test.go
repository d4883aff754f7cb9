package capture_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/capture"
)

// Ingest streams line by line: a frame far larger than any fixed scanner
// buffer (a 4 MiB result_text) is recorded, the lines around it too, and
// malformed lines are reported by number without stopping the stream.
func TestIngest_StreamsLongLinesAndReportsMalformed(t *testing.T) {
	eachStore(t, func(t *testing.T, s *store) {
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
	eachStore(t, func(t *testing.T, s *store) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		res, err := s.w.Ingest(ctx, strings.NewReader(`{"session_id":"sess-a","task_id":"task-a","tool_call_id":"c1","subagent_task":{}}`), nil)
		require.ErrorIs(t, err, context.Canceled)
		require.Zero(t, res.Frames)
		require.Equal(t, 0, s.count(t, "1 = 1"))
	})
}

// ingestLines runs Ingest over lines joined by newlines and returns the
// result and every malformed report.
func ingestLines(t *testing.T, s *store, lines []string, opts ...capture.IngestOption) (capture.IngestResult, []capture.Malformed) {
	t.Helper()
	var bad []capture.Malformed
	res, err := s.w.Ingest(context.Background(), strings.NewReader(strings.Join(lines, "\n")+"\n"),
		func(m capture.Malformed) { bad = append(bad, m) }, opts...)
	require.NoError(t, err)
	return res, bad
}

// wire is one sessA/execE frame line with the given raw tool_call_id and
// description literals (JSON string bodies, spliced in unescaped).
func wire(toolCallID, description string) string {
	return `{"session_id":"sess-a","task_id":"task-a","execution_id":"` + execE + `","tool_call_id":"` + toolCallID +
		`","subagent_task":{"description":"` + description + `","result_text":"not stored \u0000"}}`
}

// An identity the databases cannot hold exactly is one rule on both
// dialects: the frame is malformed, reported with its line and field, and
// nothing is written. Raw bytes that are not UTF-8 and lone surrogate escapes
// are seen before the JSON decoder turns them into U+FFFD, so tc-\xff and
// tc-\xfe never merge (before, they upserted one row). A real U+FFFD, a
// surrogate pair and a NUL in a field that is never stored are fine.
func TestIngest_UnstorableIdentityIsMalformedAndNeverMerges(t *testing.T) {
	lines := []string{
		wire("tc-\xff", "first agent"),    // 1: raw invalid byte in an identity
		wire("tc-\xfe", "second agent"),   // 2
		wire(`tc-\ud800`, "third agent"),  // 3: lone high surrogate
		wire(`tc-\udfff`, "fourth agent"), // 4: lone low surrogate
		wire(`tc-\ud800x`, "fifth agent"), // 5: high surrogate not followed by a low one
		`{"session_id":"sess-\u0000","task_id":"task-a","tool_call_id":"tc-s","subagent_task":{}}`,                      // 6: NUL in the session id
		"{\"session_id\":\"sess-a\",\"task_id\":\"task-\xff\",\"tool_call_id\":\"tc-t\",\"subagent_task\":{}}",          // 7: the task id
		`{"session_id":"sess-a","task_id":"task-a","execution_id":"e-\udc00","tool_call_id":"tc-e","subagent_task":{}}`, // 8: the execution id
		wire(`tc-\ufffd`, "replacement char"),  // 9: a real U+FFFD is valid
		wire("tc-\xef\xbf\xbd", "raw U+FFFD"),  // 10: the same id, raw: merges with 9, as it should
		wire(`tc-\ud83d\ude00`, "emoji"),       // 11: a surrogate pair
		wire("tc-ok", `tab\tand \\u0000 text`), // 12: an escaped backslash is not an escape
	}
	eachStore(t, func(t *testing.T, s *store) {
		res, bad := ingestLines(t, s, lines)
		var badLines []int
		for _, m := range bad {
			badLines = append(badLines, m.Line)
		}
		require.Equal(t, []int{1, 2, 3, 4, 5, 6, 7, 8}, badLines, "%+v", bad)
		require.Contains(t, bad[0].Reason, "field tool_call_id")
		require.Contains(t, bad[0].Reason, "byte 0xff")
		require.Contains(t, bad[1].Reason, "byte 0xfe")
		require.Contains(t, bad[2].Reason, `lone surrogate \ud800`)
		require.Contains(t, bad[3].Reason, `lone surrogate \udfff`)
		require.Contains(t, bad[5].Reason, "field session_id")
		require.Contains(t, bad[5].Reason, "NUL")
		require.Contains(t, bad[6].Reason, "field task_id")
		require.Contains(t, bad[7].Reason, "field execution_id")
		require.Equal(t, capture.Counters{Attempted: 4, Persisted: 4}, res.Counters)

		require.Equal(t, 3, s.count(t, "1 = 1"))
		require.Equal(t, "raw U+FFFD", *s.one(t, execE, "tc-\ufffd").Description)
		require.Equal(t, "emoji", *s.one(t, execE, "tc-\U0001F600").Description)
		require.Equal(t, "tab\tand \\u0000 text", *s.one(t, execE, "tc-ok").Description)
	})
}

// Record follows the same rule for a Go string: a NUL or bytes that are not
// UTF-8 in an identity are refused with ErrUnstorableText, counted failed and
// logged, on both dialects alike (before, SQLite stored the NUL and
// PostgreSQL refused it; SQLite stored the raw bytes).
func TestRecord_UnstorableIdentityIsRefusedOnBothDialects(t *testing.T) {
	frames := []capture.Frame{
		frame("tc-\xff", at(0)),
		frame("tc-s", at(0), func(f *capture.Frame) { f.SessionID = "sess-\x00" }),
		frame("tc-t", at(0), func(f *capture.Frame) { f.TaskID = "task-\xed\xa0\x80" }), // an encoded surrogate
		frame("tc-e", at(0), func(f *capture.Frame) { f.ExecutionID = "e\xc3\x28" }),
	}
	eachStore(t, func(t *testing.T, s *store) {
		for _, f := range frames {
			require.ErrorIs(t, s.w.Record(context.Background(), f), capture.ErrUnstorableText, f.ToolCallID)
		}
		s.record(t, frame("tc-fine", at(0), func(f *capture.Frame) { f.Subagent.Prompt = "never stored \x00\xff" }))
		require.Equal(t, capture.Counters{Attempted: 5, Persisted: 1, Failed: 4}, s.w.Counters())
		require.Equal(t, 1, s.count(t, "1 = 1"))
		var fields []string
		for _, r := range s.log.records(t) {
			if r["level"] == "WARN" {
				require.Contains(t, r["error"], "identity holds a NUL or is not UTF-8")
				fields = append(fields, strings.Fields(strings.SplitN(r["error"].(string), "field ", 2)[1])[0])
			}
		}
		require.Equal(t, []string{"tool_call_id", "session_id", "task_id", "execution_id"}, fields)
	})
}

// A line longer than the maximum is read past without being held, reported
// with its number and length, and the lines after it are recorded. A
// byte-order mark before the first line is ignored.
func TestIngest_OverLongLineIsSkippedAndReported(t *testing.T) {
	eachStore(t, func(t *testing.T, s *store) {
		long := wire("tc-long", strings.Repeat("d", 300<<10)) // several reader buffers
		atLimit := wire("tc-4", "")
		atLimit = wire("tc-4", strings.Repeat("e", 1024-len(atLimit))) // exactly the limit: kept
		require.Len(t, atLimit, 1024)
		res, bad := ingestLines(t, s, []string{
			"\xef\xbb\xbf" + wire("tc-1", "after the BOM"),
			long,
			wire("tc-3", "after the long line"),
			atLimit,
		}, capture.WithMaxLine(1024))
		require.Len(t, bad, 1, "%+v", bad)
		require.Equal(t, 2, bad[0].Line)
		require.Equal(t, int64(len(long)), bad[0].Length)
		require.Contains(t, bad[0].Reason, "longer than the maximum line length (1024 bytes)")
		require.Equal(t, 4, res.Lines)
		require.Equal(t, capture.Counters{Attempted: 3, Persisted: 3}, res.Counters)
		require.Equal(t, "after the BOM", *s.one(t, execE, "tc-1").Description)
		require.Equal(t, "after the long line", *s.one(t, execE, "tc-3").Description)
		require.Equal(t, 0, s.count(t, "tool_call_id = 'tc-long'"))
	})
}

// A bad value of 1 MB is quoted as a short excerpt: every report stays under
// 1 KiB, whatever part of the frame it was in.
func TestIngest_MalformedReportsQuoteAShortExcerpt(t *testing.T) {
	mb := strings.Repeat("7", 1<<20)
	lines := []string{
		`{"session_id":"sess-a","task_id":"task-a","tool_call_id":"c","observed_at":"` + mb + `","subagent_task":{}}`,
		`{"session_id":"sess-a","task_id":"task-a","tool_call_id":"c","subagent_task":{"total_tokens":` + mb + `}}`,
		`{"session_id":"sess-a","task_id":"task-a","tool_call_id":"c","subagent_task":{"tool_use_count":` + mb + `.5}}`,
		wire(mb+"\xff", "d"),
		`{"session_id":"` + mb + `\u0000","task_id":"task-a","tool_call_id":"c","subagent_task":{}}`,
		`{"session_id":"sess-a","task_id":"task-a","tool_call_id":"c","subagent_task":{"description":` + mb + `}}`,
		`{"session_id":` + mb + `x}`,
	}
	eachStore(t, func(t *testing.T, s *store) {
		_, bad := ingestLines(t, s, lines)
		require.Len(t, bad, len(lines))
		for i, m := range bad {
			require.Equal(t, i+1, m.Line)
			require.Less(t, len(m.Reason), 1024, "line %d: %.200s", m.Line, m.Reason)
			require.NotEmpty(t, m.Reason)
		}
		require.Contains(t, bad[0].Reason, "observed_at")
		require.Contains(t, bad[0].Reason, "(1048576 bytes)")
		require.Contains(t, bad[3].Reason, "field tool_call_id")
		require.Equal(t, 0, s.count(t, "1 = 1"))
	})
}
