package transcript

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// render is the reference the streamed rendering (planLog, foldPlan.each)
// is checked against: it builds the readable transcript from a log's lines: tool results are
// folded into their calls (the last result for a call wins: it is the final
// one). A result appended before its call (events reaching the store on
// separate paths) is folded into that call when it arrives; a result whose
// call never appears stays a standalone event.
func render(h Header, events []Event) *Transcript {
	t := &Transcript{Format: Format, Header: h, Status: Running, Events: []Event{}}
	calls := map[string]int{}   // call id → index in t.Events
	early := map[string][]int{} // call id → indexes of results still without a call
	drop := map[int]bool{}
	fold := func(i int, e Event) {
		r := *e.Result
		r.Seq = e.Seq
		at := e.At
		r.At = &at
		t.Events[i].Result = &r
	}
	for _, e := range events {
		t.LastSeq = e.Seq
		if e.Type == ToolResult {
			if i, ok := calls[e.Result.CallID]; ok {
				fold(i, e)
				continue
			}
			early[e.Result.CallID] = append(early[e.Result.CallID], len(t.Events))
		}
		if e.Type == ToolCall {
			calls[e.Call.ID] = len(t.Events)
			if rs := early[e.Call.ID]; len(rs) > 0 {
				last := t.Events[rs[len(rs)-1]]
				e.Result = nil
				t.Events = append(t.Events, e)
				fold(len(t.Events)-1, last)
				for _, j := range rs {
					drop[j] = true
				}
				delete(early, e.Call.ID)
				continue
			}
		}
		t.Events = append(t.Events, e)
	}
	if len(drop) > 0 {
		kept := t.Events[:0]
		for i, e := range t.Events {
			if !drop[i] {
				kept = append(kept, e)
			}
		}
		t.Events = kept
	}
	return t
}

// The streamed rendering of a log (planned in one pass, yielded in a second,
// each folded result read again by its offset) gives what rendering the
// events in memory gives, for random mixes of calls, results before and after
// their calls, repeated call ids and results whose call never comes; and the
// document finish writes is, byte for byte, json.MarshalIndent of it.
func TestTranscript_StreamedRenderIsTheInMemoryRender(t *testing.T) {
	for seed := range uint64(40) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			s, err := NewStore(filepath.Join(t.TempDir(), "root"))
			require.NoError(t, err)
			at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
			h := Header{ParentSessionID: "s", AgentID: "a", Kind: KindScheduled, StartedAt: at}
			require.NoError(t, s.Create(context.Background(), h))
			var events []Event
			for i := range 1 + rng.IntN(60) {
				id := fmt.Sprintf("c%d", rng.IntN(6))
				var e Event
				switch rng.IntN(4) {
				case 0:
					e = Event{Type: AssistantMessage, Text: fmt.Sprintf("text %d <&>", i)}
				case 1:
					e = Event{Type: ToolCall, Call: &Call{ID: id, Name: "Bash", Input: json.RawMessage(`{"n": [1, 2]}`)}}
				default:
					e = Event{Type: ToolResult, Result: &Result{CallID: id, Output: fmt.Sprintf("out %d", i), IsError: rng.IntN(3) == 0}}
				}
				e.At = at.Add(time.Duration(i) * time.Second)
				require.NoError(t, s.Append(context.Background(), "s", "a", e))
				e.Seq = int64(i + 1)
				if e.Call != nil {
					e.Call = &Call{ID: e.Call.ID, Name: e.Call.Name, Input: json.RawMessage(`{"n":[1,2]}`)}
				}
				events = append(events, e)
			}
			want := render(h, events)
			running, err := s.Load("s", "a")
			require.NoError(t, err)
			running.Path = ""
			require.Equal(t, want, running)

			end := at.Add(time.Hour)
			require.NoError(t, s.Finish(context.Background(), "s", "a", End{Status: Completed, At: end}))
			want.Status, want.EndedAt = Completed, &end
			b, err := json.MarshalIndent(want, "", "  ")
			require.NoError(t, err)
			p, _ := s.PathsFor("s", "a")
			doc, err := os.ReadFile(p.Transcript)
			require.NoError(t, err)
			require.Equal(t, string(append(b, '\n')), string(doc))
			finished, err := s.Load("s", "a")
			require.NoError(t, err)
			finished.Path = ""
			require.Equal(t, want, finished)

			var out bytes.Buffer
			r, err := s.Open(context.Background(), "s", "a")
			require.NoError(t, err)
			defer r.Close()
			require.NoError(t, r.WriteJSON(context.Background(), &out))
			require.Equal(t, string(doc), out.String(), "show --json prints the document's bytes")
		})
	}
}
