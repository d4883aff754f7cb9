package capture_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/capture"
)

// AC-14: N frames for one key race each other through separate connections.
// Exactly one row results, and every order-independent invariant holds:
// observed_at is one frame's, settled_at is one terminal frame's, tool_status
// is terminal, turn_id was filled, is_async stuck, and the learned metric was
// never blanked by a zero or negative frame.
func TestRecord_AC14_ConcurrentSameKeyOneRow(t *testing.T) {
	const n = 24
	eachStore(t, func(t *testing.T, s *store) {
		frames := make([]capture.Frame, n)
		observed := map[time.Time]bool{}
		terminalAt := map[time.Time]bool{}
		anomalous := int64(0)
		for i := range frames {
			f := frame("toolu_race", at(time.Duration(i)*time.Millisecond))
			observed[f.ObservedAt] = true
			switch {
			case i%6 == 0:
				f.ToolStatus = "completed"
				terminalAt[f.ObservedAt] = true
			case i%2 == 0:
				f.ToolStatus = "in_progress"
			}
			if i%3 == 0 {
				f.TurnID = ""
			}
			switch i % 4 {
			case 0:
				f.Subagent.TotalTokens = 900
			case 1:
				f.Subagent.TotalTokens = -1
				anomalous++
			}
			f.Subagent.IsAsync = i == n/2
			if i%5 == 0 {
				f.Subagent.Model = fmt.Sprintf("model-%d", i)
			}
			frames[i] = f
		}
		for _, err := range recordAll(s.w, frames) {
			require.NoError(t, err)
		}

		rows := s.rows(t, sessA)
		require.Len(t, rows, 1)
		r := rows[0]
		require.True(t, observed[r.ObservedAt], "observed_at is one frame's observation: %v", r.ObservedAt)
		require.NotNil(t, r.SettledAt)
		require.True(t, terminalAt[*r.SettledAt], "settled_at is a terminal frame's observation: %v", *r.SettledAt)
		require.Equal(t, "completed", *r.ToolStatus)
		require.Equal(t, turn1, *r.TurnID)
		require.True(t, r.IsAsync)
		require.Equal(t, int64(900), *r.TotalTokens)
		require.NotNil(t, r.Model)
		require.Equal(t, "live", r.Source)
		require.Equal(t, capture.Counters{Attempted: n, Persisted: n, AnomalousValue: anomalous}, s.w.Counters())
	})
}

// AC-15: concurrent fan-outs of 3 to 8 subagents, plus the same tool-call ids
// reused by a second execution, all land as separate rows carrying their own
// frame's data.
func TestRecord_AC15_ConcurrentFanOutsAllRowsWritten(t *testing.T) {
	eachStore(t, func(t *testing.T, s *store) {
		var frames []capture.Frame
		for width := 3; width <= 8; width++ {
			for i := range width {
				for _, ex := range []string{execE, execL} {
					tc := fmt.Sprintf("toolu_w%d_%d", width, i)
					frames = append(frames, frame(tc, at(time.Duration(width)*time.Second), func(f *capture.Frame) {
						f.ExecutionID = ex
						f.TurnID = fmt.Sprintf("turn-w%d", width)
						f.Subagent.Description = tc + "@" + ex
						f.Subagent.TotalTokens = int64(width*100 + i)
					}))
				}
			}
		}
		_ = recordAll(s.w, frames)

		require.Equal(t, capture.Counters{Attempted: int64(len(frames)), Persisted: int64(len(frames))}, s.w.Counters())
		rows := s.rows(t, sessA)
		require.Len(t, rows, len(frames))
		for _, r := range rows {
			require.Equal(t, r.ToolCallID+"@"+r.AgentExecutionID, *r.Description, "each row carries its own frame")
		}
		for width := 3; width <= 8; width++ {
			byTurn, err := capture.ListByTurn(context.Background(), s.DB.DB, s.Dialect, fmt.Sprintf("turn-w%d", width))
			require.NoError(t, err)
			require.Len(t, byTurn, 2*width)
		}
	})
}
