package transcript_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/transcript"
)

// Acceptance test 1: a successful run_in_background execution leaves one
// child JSON with its prompt, assistant response and a paired tool call/result.
func TestTranscript_AT1_SuccessfulChildLeavesOneJSONWithPairedToolCall(t *testing.T) {
	s, h := created(t, "sess-parent-1", "agent-ok", transcript.KindRunInBackground)
	require.NoError(t, s.Append(ctx, h.ParentSessionID, h.AgentID,
		msg(transcript.UserMessage, "Count the Go files under ./keys."),
		call("toolu_1", "Glob", `{"pattern":"keys/*.go"}`)))
	require.NoError(t, s.Append(ctx, h.ParentSessionID, h.AgentID, result("toolu_1", "keys/instant.go\nkeys/keys.go", false, "")))
	require.NoError(t, s.Append(ctx, h.ParentSessionID, h.AgentID, msg(transcript.AssistantMessage, "There are 2 Go files.")))
	require.NoError(t, s.Finish(ctx, h.ParentSessionID, h.AgentID, transcript.End{Status: transcript.Completed}))

	entries, err := os.ReadDir(filepath.Join(s.Root(), "background", h.ParentSessionID))
	require.NoError(t, err)
	var docs []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".json") {
			docs = append(docs, e.Name())
		}
	}
	require.Equal(t, []string{"agent-ok.json"}, docs, "exactly one child JSON")

	doc := readDoc(t, s, h.ParentSessionID, h.AgentID)
	require.Equal(t, transcript.Format, doc["format"])
	require.Equal(t, "completed", doc["status"])
	require.Equal(t, "sess-parent-1", doc["parent_session_id"])
	require.Equal(t, "agent-ok", doc["agent_id"])
	require.Equal(t, "exec-agent-ok", doc["execution_id"])
	require.Equal(t, "run_in_background", doc["kind"])
	require.Equal(t, "claude-sonnet-4-5", doc["model"])
	require.Equal(t, "2026-08-21T09:30:00.123456789Z", doc["started_at"])
	require.NotEmpty(t, doc["ended_at"])

	events := doc["events"].([]any)
	require.Len(t, events, 3, "the tool result is folded into its call")
	require.Equal(t, "user_message", events[0].(map[string]any)["type"])
	require.Equal(t, "Count the Go files under ./keys.", events[0].(map[string]any)["text"])
	tc := events[1].(map[string]any)
	require.Equal(t, "tool_call", tc["type"])
	require.Equal(t, "Glob", tc["call"].(map[string]any)["name"])
	res := tc["result"].(map[string]any)
	require.Equal(t, "toolu_1", res["call_id"])
	require.Equal(t, "keys/instant.go\nkeys/keys.go", res["output"])
	require.EqualValues(t, 3, res["seq"])
	require.Equal(t, "There are 2 Go files.", events[2].(map[string]any)["text"])

	tr, err := s.Load(h.ParentSessionID, h.AgentID)
	require.NoError(t, err)
	require.Equal(t, "There are 2 Go files.", tr.FinalResponse())
	require.Len(t, tr.ToolCalls(), 1)
	require.Equal(t, int64(4), tr.LastSeq)
}

// Acceptance test 2: a failed child leaves the same record with its error,
// the failed tool call's detail, and a terminal status.
func TestTranscript_AT2_FailedChildKeepsErrorAndTerminalStatus(t *testing.T) {
	s, h := created(t, "sess-parent-2", "agent-fail", transcript.KindRunInBackground)
	require.NoError(t, s.Append(ctx, h.ParentSessionID, h.AgentID,
		msg(transcript.UserMessage, "Vet ./keys."),
		call("toolu_9", "Bash", `{"command":"go vet ./keys"}`),
		result("toolu_9", "keys/keys.go:42:2: unreachable code", true, "exit code 1")))
	require.NoError(t, s.Finish(ctx, h.ParentSessionID, h.AgentID,
		transcript.End{Status: transcript.Failed, Error: "provider: error_max_turns"}))

	doc := readDoc(t, s, h.ParentSessionID, h.AgentID)
	require.Equal(t, "failed", doc["status"])
	require.Equal(t, "provider: error_max_turns", doc["error"])
	res := doc["events"].([]any)[1].(map[string]any)["result"].(map[string]any)
	require.Equal(t, true, res["is_error"])
	require.Equal(t, "exit code 1", res["error"])
	require.Equal(t, "keys/keys.go:42:2: unreachable code", res["output"])
}

// Requirement 1: a child that fails during setup (after create, before any
// provider turn) still ends with a terminal record.
func TestTranscript_SetupFailureStillLeavesTerminalRecord(t *testing.T) {
	s, h := created(t, "sess-setup", "agent-setup", transcript.KindTodoDelegate)
	require.NoError(t, s.Finish(ctx, h.ParentSessionID, h.AgentID,
		transcript.End{Status: transcript.Failed, Error: "setup: worktree: no space left on device"}))
	tr, err := s.Load(h.ParentSessionID, h.AgentID)
	require.NoError(t, err)
	require.Equal(t, transcript.Failed, tr.Status)
	require.Equal(t, "setup: worktree: no space left on device", tr.Error)
	require.Empty(t, tr.Events)
}

// runChild is the one persistence path every background execution takes,
// whatever started it (requirement 3): create, append, finish.
func runChild(t *testing.T, s *transcript.Store, h transcript.Header, prompt string) {
	t.Helper()
	require.NoError(t, s.Create(ctx, h))
	require.NoError(t, s.Append(ctx, h.ParentSessionID, h.AgentID, msg(transcript.UserMessage, prompt)))
	require.NoError(t, s.Append(ctx, h.ParentSessionID, h.AgentID, call("c1", "Read", `{"path":"a.go"}`), result("c1", "package a", false, "")))
	require.NoError(t, s.Append(ctx, h.ParentSessionID, h.AgentID, msg(transcript.AssistantMessage, "done: "+prompt)))
	require.NoError(t, s.Finish(ctx, h.ParentSessionID, h.AgentID, transcript.End{Status: transcript.Completed}))
}

// Acceptance test 3: a scheduled child and a todo-task delegate use the same
// persistence contract as run_in_background, with no special case: same
// layout, same document keys, same event shapes; only the kind differs.
func TestTranscript_AT3_ScheduledAndDelegatedChildrenShareTheContract(t *testing.T) {
	s := newStore(t)
	kinds := []transcript.Kind{transcript.KindRunInBackground, transcript.KindScheduled, transcript.KindTodoDelegate}
	var shapes []string
	for _, k := range kinds {
		agent := "agent-" + string(k)
		runChild(t, s, header("schedule-cron--fba2d19b_1787243435990159000", agent, k), "prompt for "+string(k))
		doc := readDoc(t, s, "schedule-cron--fba2d19b_1787243435990159000", agent)
		require.Equal(t, string(k), doc["kind"])
		require.Equal(t, "completed", doc["status"])
		shapes = append(shapes, shape(doc))

		tr, err := s.Load("schedule-cron--fba2d19b_1787243435990159000", agent)
		require.NoError(t, err)
		require.Equal(t, "done: prompt for "+string(k), tr.FinalResponse())
		require.Equal(t, "package a", tr.ToolCalls()[0].Result.Output)
	}
	require.Equal(t, shapes[0], shapes[1], "scheduled child differs in shape from run_in_background")
	require.Equal(t, shapes[0], shapes[2], "todo delegate differs in shape from run_in_background")

	sums, err := s.List(context.Background(), "schedule-cron--fba2d19b_1787243435990159000")
	require.NoError(t, err)
	require.Len(t, sums, 3)
}

// shape describes a JSON value's structure (keys and types, not values).
func shape(v any) string {
	switch v := v.(type) {
	case map[string]any:
		var parts []string
		for k, x := range v {
			parts = append(parts, k+":"+shape(x))
		}
		sort.Strings(parts)
		return "{" + strings.Join(parts, ",") + "}"
	case []any:
		var parts []string
		for _, x := range v {
			parts = append(parts, shape(x))
		}
		return "[" + strings.Join(parts, ",") + "]"
	case string:
		return "s"
	case float64:
		return "n"
	case bool:
		return "b"
	}
	return "null"
}

func TestTranscript_CreateIsExclusive(t *testing.T) {
	s, h := created(t, "sess-x", "agent-x", transcript.KindRunInBackground)
	require.NoError(t, s.Append(ctx, "sess-x", "agent-x", msg(transcript.UserMessage, "first")))
	p, _ := s.PathsFor("sess-x", "agent-x")
	before, err := os.ReadFile(p.Log)
	require.NoError(t, err)

	h2 := h
	h2.Model = "other-model"
	require.ErrorIs(t, s.Create(ctx, h2), transcript.ErrExists)
	after, err := os.ReadFile(p.Log)
	require.NoError(t, err)
	require.Equal(t, before, after, "a second create must not touch the running transcript")

	require.NoError(t, s.Finish(ctx, "sess-x", "agent-x", transcript.End{Status: transcript.Completed}))
	doc, err := os.ReadFile(p.Transcript)
	require.NoError(t, err)
	require.ErrorIs(t, s.Create(ctx, h2), transcript.ErrExists)
	again, err := os.ReadFile(p.Transcript)
	require.NoError(t, err)
	require.Equal(t, doc, again, "a create must not touch a finished transcript")
}

// Many goroutines create the same id at once: exactly one wins.
func TestTranscript_ConcurrentCreateHasOneWinner(t *testing.T) {
	s := newStore(t)
	const n = 16
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = s.Create(ctx, header("sess-c", "agent-c", transcript.KindRunInBackground)) })
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		if err == nil {
			won++
		} else {
			require.ErrorIs(t, err, transcript.ErrExists)
		}
	}
	require.Equal(t, 1, won)
}

func TestTranscript_AppendToUnknownIDIsRejectedNotFabricated(t *testing.T) {
	s := newStore(t)
	err := s.Append(ctx, "exec-step-1787", "workflow-step-3", msg(transcript.AssistantMessage, "step output"))
	require.ErrorIs(t, err, transcript.ErrNotFound)
	require.ErrorIs(t, s.Finish(ctx, "exec-step-1787", "workflow-step-3", transcript.End{Status: transcript.Completed}), transcript.ErrNotFound)
	_, err = os.Stat(filepath.Join(s.Root(), "background", "exec-step-1787"))
	require.True(t, errors.Is(err, os.ErrNotExist), "nothing may be created for an id that was never created: %v", err)
}

func TestTranscript_FinishOnceThenImmutable(t *testing.T) {
	s, _ := created(t, "sess-f", "agent-f", transcript.KindRunInBackground)
	require.NoError(t, s.Append(ctx, "sess-f", "agent-f", msg(transcript.AssistantMessage, "hello")))
	require.NoError(t, s.Finish(ctx, "sess-f", "agent-f", transcript.End{Status: transcript.TimedOut, Error: "deadline 10m"}))
	p, _ := s.PathsFor("sess-f", "agent-f")
	doc, err := os.ReadFile(p.Transcript)
	require.NoError(t, err)
	logBefore, err := os.ReadFile(p.Log)
	require.NoError(t, err)

	require.ErrorIs(t, s.Finish(ctx, "sess-f", "agent-f", transcript.End{Status: transcript.Completed}), transcript.ErrFinished)
	require.ErrorIs(t, s.Append(ctx, "sess-f", "agent-f", msg(transcript.AssistantMessage, "late")), transcript.ErrFinished)

	again, err := os.ReadFile(p.Transcript)
	require.NoError(t, err)
	require.Equal(t, doc, again)
	logAfter, err := os.ReadFile(p.Log)
	require.NoError(t, err)
	require.Equal(t, logBefore, logAfter)
	tr, err := s.Load("sess-f", "agent-f")
	require.NoError(t, err)
	require.Equal(t, transcript.TimedOut, tr.Status)
	require.Equal(t, "deadline 10m", tr.Error)
	require.Len(t, tr.Events, 1)
}

// Goroutines racing to finish and append: one finish wins; every append
// either landed before the finish (and is in the document) or was rejected.
func TestTranscript_ConcurrentFinishAndAppend(t *testing.T) {
	s, _ := created(t, "sess-r", "agent-r", transcript.KindRunInBackground)
	var wg sync.WaitGroup
	var mu sync.Mutex
	finished, appended := 0, map[string]bool{}
	for i := 0; i < 8; i++ {
		wg.Add(2)
		go func(i int) {
			defer wg.Done()
			err := s.Finish(ctx, "sess-r", "agent-r", transcript.End{Status: transcript.Cancelled})
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				finished++
			} else if !errors.Is(err, transcript.ErrFinished) {
				t.Errorf("finish: %v", err)
			}
		}(i)
		go func(i int) {
			defer wg.Done()
			text := "msg-" + string(rune('a'+i))
			err := s.Append(ctx, "sess-r", "agent-r", msg(transcript.AssistantMessage, text))
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				appended[text] = true
			} else if !errors.Is(err, transcript.ErrFinished) {
				t.Errorf("append: %v", err)
			}
		}(i)
	}
	wg.Wait()
	require.Equal(t, 1, finished)
	tr, err := s.Load("sess-r", "agent-r")
	require.NoError(t, err)
	got := map[string]bool{}
	for _, e := range tr.Events {
		got[e.Text] = true
	}
	require.Equal(t, appended, got, "the document holds exactly the appends that returned nil")
}

func TestTranscript_PathComponentsAreValidated(t *testing.T) {
	s := newStore(t)
	cases := []struct{ name, session, agent, want string }{
		{"dotdot agent", "sess", "..", `agent id ".."`},
		{"traversal agent", "sess", "../../etc/passwd", `agent id "../../etc/passwd"`},
		{"slash agent", "sess", "a/b", `agent id "a/b"`},
		{"NUL agent", "sess", "a\x00b", `agent id "a\x00b"`},
		{"dotdot session", "..", "agent", `session id ".."`},
		{"backslash session", `a\b`, "agent", `session id "a\\b"`},
		{"empty session", "", "agent", `session id ""`},
		{"hidden agent", "sess", ".agent", `agent id ".agent"`},
		{"too long agent", "sess", strings.Repeat("a", 201), "longer than 200"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := header(c.session, c.agent, transcript.KindRunInBackground)
			for _, err := range []error{
				s.Create(ctx, h),
				s.Append(ctx, c.session, c.agent, msg(transcript.UserMessage, "x")),
				s.Finish(ctx, c.session, c.agent, transcript.End{Status: transcript.Failed}),
			} {
				require.ErrorIs(t, err, transcript.ErrInvalidID)
				require.Contains(t, err.Error(), c.want)
			}
			_, err := s.Load(c.session, c.agent)
			require.ErrorIs(t, err, transcript.ErrInvalidID)
		})
	}
	_, err := os.Stat(s.Root())
	require.True(t, errors.Is(err, os.ErrNotExist), "no invalid id may create anything")
}

func TestTranscript_InvalidEventsAreRejectedWhole(t *testing.T) {
	s, _ := created(t, "sess-v", "agent-v", transcript.KindRunInBackground)
	bad := []transcript.Event{
		{Type: "thinking", Text: "x"},
		{Type: transcript.AssistantMessage},
		{Type: transcript.ToolCall, Call: &transcript.Call{ID: "c"}},
		{Type: transcript.ToolCall, Call: &transcript.Call{ID: "c", Name: "n", Input: json.RawMessage("{not json")}},
		{Type: transcript.ToolResult, Result: &transcript.Result{}},
	}
	for _, e := range bad {
		err := s.Append(ctx, "sess-v", "agent-v", msg(transcript.UserMessage, "good"), e)
		require.ErrorIs(t, err, transcript.ErrInvalidEvent)
	}
	tr, err := s.Load("sess-v", "agent-v")
	require.NoError(t, err)
	require.Empty(t, tr.Events, "a batch with an invalid event writes nothing")
}

// A crash that tears the last line (power loss mid-write) leaves a readable
// running transcript: the torn bytes are ignored on read and cut off by the
// next append, which continues the sequence.
func TestTranscript_TornLastLineIsIgnoredAndRepaired(t *testing.T) {
	s, _ := created(t, "sess-t", "agent-t", transcript.KindRunInBackground)
	require.NoError(t, s.Append(ctx, "sess-t", "agent-t", msg(transcript.UserMessage, "one"), msg(transcript.AssistantMessage, "two")))
	p, _ := s.PathsFor("sess-t", "agent-t")
	f, err := os.OpenFile(p.Log, os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	torn := `{"seq":3,"at":"2026-08-21T09:31:00Z","type":"assistant_message","text":"thr`
	_, err = f.WriteString(torn)
	require.NoError(t, err)
	require.NoError(t, f.Close())

	tr, err := s.Load("sess-t", "agent-t")
	require.NoError(t, err)
	require.Equal(t, transcript.Running, tr.Status)
	require.Equal(t, len(torn), tr.TornBytes)
	require.Len(t, tr.Events, 2)
	require.Equal(t, int64(2), tr.LastSeq)

	require.NoError(t, s.Append(ctx, "sess-t", "agent-t", msg(transcript.AssistantMessage, "three")))
	tr, err = s.Load("sess-t", "agent-t")
	require.NoError(t, err)
	require.Zero(t, tr.TornBytes)
	require.Equal(t, []string{"one", "two", "three"}, texts(tr))
	require.Equal(t, int64(3), tr.LastSeq)
}

// A complete line that does not parse, or a gap in the sequence, is
// corruption: reported, never silently skipped.
func TestTranscript_CorruptLogIsReported(t *testing.T) {
	for name, mutate := range map[string]func(string) string{
		"garbage line": func(s string) string {
			return strings.Replace(s, `"text":"two"}`+"\n", `"text":"two"}`+"\nnot json\n", 1)
		},
		"seq gap":   func(s string) string { return strings.Replace(s, `"seq":2`, `"seq":5`, 1) },
		"no header": func(s string) string { return s[strings.Index(s, "\n")+1:] },
	} {
		t.Run(name, func(t *testing.T) {
			s, _ := created(t, "sess-k", "agent-k", transcript.KindRunInBackground)
			require.NoError(t, s.Append(ctx, "sess-k", "agent-k", msg(transcript.UserMessage, "one"), msg(transcript.AssistantMessage, "two")))
			p, _ := s.PathsFor("sess-k", "agent-k")
			b, err := os.ReadFile(p.Log)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(p.Log, []byte(mutate(string(b))), 0o644))
			_, err = s.Load("sess-k", "agent-k")
			require.ErrorIs(t, err, transcript.ErrCorrupt)
			require.ErrorIs(t, s.Finish(ctx, "sess-k", "agent-k", transcript.End{Status: transcript.Completed}), transcript.ErrCorrupt)
		})
	}
}

func TestTranscript_LoadPathAcceptsEitherFileOrStem(t *testing.T) {
	s, _ := created(t, "sess-p", "agent-p", transcript.KindRunInBackground)
	require.NoError(t, s.Append(ctx, "sess-p", "agent-p", msg(transcript.UserMessage, "hi")))
	p, _ := s.PathsFor("sess-p", "agent-p")
	stem := strings.TrimSuffix(p.Transcript, ".json")
	for _, path := range []string{p.Log, p.Transcript, stem} {
		tr, err := transcript.LoadPath(path)
		require.NoError(t, err, path)
		require.Equal(t, transcript.Running, tr.Status)
		require.Equal(t, p.Log, tr.Path)
	}
	_, err := transcript.LoadPath(filepath.Join(s.Root(), "background", "sess-p", "nobody.json"))
	require.ErrorIs(t, err, transcript.ErrNotFound)
}
