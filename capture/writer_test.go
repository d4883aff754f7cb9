package capture_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/capture"
	"github.com/schemastate/schemastate/toolstatus"
)

// AC-1, AC-30: the creating frame writes source 'live', its own observation
// time, and its execution id verbatim.
func TestRecord_AC1_AC30_CreateIsLiveAtObservation(t *testing.T) {
	eachStore(t, func(t *testing.T, s *store) {
		s.record(t, frame("toolu_1", at(0)))
		r := s.one(t, execE, "toolu_1")
		require.Equal(t, "live", r.Source)
		require.True(t, r.ObservedAt.Equal(at(0)), r.ObservedAt)
		require.Equal(t, execE, r.AgentExecutionID)
		require.Equal(t, taskA, r.TaskID)
		require.Equal(t, turn1, *r.TurnID)
		require.Nil(t, r.SettledAt)
	})
}

// A row Record creates gets a random version 4 UUID as its id, a new one per
// row.
func TestRecord_RowIDIsARandomUUID(t *testing.T) {
	eachStore(t, func(t *testing.T, s *store) {
		s.record(t, frame("toolu_1", at(0)), frame("toolu_2", at(1)))
		ids := s.Strings(t, `SELECT id FROM task_session_subagents ORDER BY tool_call_id`)
		require.Len(t, ids, 2)
		for _, id := range ids {
			require.Regexp(t, `^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`, id)
		}
		require.NotEqual(t, ids[0], ids[1])
	})
}

// AC-1 on the merge path: a live frame without an execution id lands on a
// backfilled row (both use the 'unknown' sentinel). source and observed_at
// stay; every other column fills forward.
func TestRecord_AC1_MergeOntoBackfilledRowKeepsProvenance(t *testing.T) {
	eachStore(t, func(t *testing.T, s *store) {
		backfilled := at(-24 * time.Hour)
		_, err := s.DB.DB.Exec(s.Q(`INSERT INTO task_session_subagents
			(id, task_session_id, task_id, turn_id, agent_execution_id, tool_call_id, subagent_type,
			 agent_status, tool_status, source, observed_at, settled_at, updated_at)
			VALUES ('bf-1', ?, ?, ?, 'unknown', 'toolu_bf', 'reviewer', 'completed', 'completed', 'backfill', ?, ?, ?)`),
			sessA, taskA, turn1, s.ts(backfilled), s.ts(backfilled), s.ts(backfilled))
		require.NoError(t, err)

		s.record(t, frame("toolu_bf", at(0), func(f *capture.Frame) {
			f.ExecutionID = ""
			f.ToolStatus = "completed"
			f.Subagent = capture.SubagentTask{Model: "claude-opus-5[1m]", AgentID: "agent-9", TotalTokens: 1200, ToolUseCount: intp(4)}
		}))

		rows := s.rows(t, sessA)
		require.Len(t, rows, 1, "the live frame merged; no second row")
		r := rows[0]
		require.Equal(t, "bf-1", r.ID)
		require.Equal(t, "backfill", r.Source, "source is write-once")
		require.True(t, r.ObservedAt.Equal(backfilled), "observed_at is write-once: %v", r.ObservedAt)
		require.True(t, r.SettledAt.Equal(backfilled), "settled_at is write-once")
		require.Equal(t, capture.UnknownExecution, r.AgentExecutionID)
		require.Equal(t, "reviewer", *r.SubagentType, "absent value never blanks")
		require.Equal(t, "claude-opus-5[1m]", *r.Model)
		require.Equal(t, "agent-9", *r.AgentID)
		require.Equal(t, int64(1200), *r.TotalTokens)
		require.Equal(t, int64(4), *r.ToolUseCount)
		require.Equal(t, int64(1), s.w.Counters().UnknownExecution)
	})
}

// AC-1a (revision 3): observed_at is the observation time of the frame that
// CREATED the row, never the minimum of the observations seen. A frame
// observed later but committed first creates the row; the frame observed
// earlier, committed second, merges and leaves observed_at alone. An upsert
// that kept LEAST(stored, excluded) — what AC-1a forbids — would move it back
// to the earlier observation.
func TestRecord_AC1a_LaterObservedFrameCommittedFirstKeepsItsObservation(t *testing.T) {
	eachStore(t, func(t *testing.T, s *store) {
		later, earlier := at(5*time.Second), at(0)
		s.record(t, frame("toolu_1a", later, func(f *capture.Frame) { f.Subagent.SubagentType = "reviewer" }))
		s.record(t, frame("toolu_1a", earlier, func(f *capture.Frame) { f.Subagent.Model = "m-2" }))
		r := s.one(t, execE, "toolu_1a")
		require.True(t, r.ObservedAt.Equal(later), "observed_at is the creating frame's: want %s, got %s", later, r.ObservedAt)
		require.Equal(t, "m-2", *r.Model, "the second frame did merge")
	})
}

// AC-2, AC-26: a frame missing any of the three identities writes nothing and
// counts skipped_no_identity only — not anomalous_value, not
// unknown_execution, whatever else it carries.
func TestRecord_AC2_MissingIdentitySkips(t *testing.T) {
	cases := map[string]func(*capture.Frame){
		"no session":   func(f *capture.Frame) { f.SessionID = "" },
		"no task":      func(f *capture.Frame) { f.TaskID = "" },
		"no tool call": func(f *capture.Frame) { f.ToolCallID = "" },
	}
	eachStore(t, func(t *testing.T, s *store) {
		for name, mod := range cases {
			f := frame("toolu_x", at(0), mod, func(f *capture.Frame) {
				f.ExecutionID = ""
				f.Subagent.TotalTokens = -5
			})
			require.ErrorIs(t, s.w.Record(context.Background(), f), capture.ErrNoIdentity, name)
		}
		require.Equal(t, 0, s.count(t, "1 = 1"))
		require.Equal(t, capture.Counters{Attempted: 3, SkippedNoIdentity: 3}, s.w.Counters())
	})
}

// AC-31: an empty execution id is written as 'unknown' (never skipped, never
// NULL or empty) and counted in addition to persisted.
func TestRecord_AC31_EmptyExecutionWritesUnknown(t *testing.T) {
	eachStore(t, func(t *testing.T, s *store) {
		s.record(t, frame("toolu_u", at(0), func(f *capture.Frame) { f.ExecutionID = "" }))
		r := s.one(t, capture.UnknownExecution, "toolu_u")
		require.Equal(t, "live", r.Source)
		require.Equal(t, capture.Counters{Attempted: 1, Persisted: 1, UnknownExecution: 1}, s.w.Counters())
		require.Equal(t, 0, s.count(t, "agent_execution_id IS NULL OR agent_execution_id = ''"))
	})
}

// AC-31: the writer names agent_execution_id in every insert, writing
// 'unknown' itself for a frame without one — it never leaves the value to the
// column's DEFAULT. Run against a table whose column has no default (as a
// host's hand-made table might), an insert that omitted the column would fail
// NOT NULL instead of writing the row.
func TestRecord_AC31_InsertNamesExecutionIDWithoutTheDefault(t *testing.T) {
	eachStore(t, func(t *testing.T, s *store) {
		s.SetColumnDefault(t, "task_session_subagents", "agent_execution_id", "")
		s.record(t,
			frame("toolu_nodefault_u", at(0), func(f *capture.Frame) { f.ExecutionID = "" }),
			frame("toolu_nodefault_e", at(0)))
		require.Equal(t, capture.UnknownExecution, s.one(t, capture.UnknownExecution, "toolu_nodefault_u").AgentExecutionID)
		require.Equal(t, execE, s.one(t, execE, "toolu_nodefault_e").AgentExecutionID)
		require.Equal(t, capture.Counters{Attempted: 2, Persisted: 2, UnknownExecution: 1}, s.w.Counters())
	})
}

// AC-2a: a stored NULL turn is filled forward; between two non-empty turns
// the first wins; an empty turn never blanks one.
func TestRecord_AC2a_TurnFillForwardFirstNonEmptyWins(t *testing.T) {
	eachStore(t, func(t *testing.T, s *store) {
		noTurn := func(f *capture.Frame) { f.TurnID = "" }
		s.record(t, frame("toolu_t", at(0), noTurn))
		require.Nil(t, s.one(t, execE, "toolu_t").TurnID, "no turn resolved: NULL, not ''")

		s.record(t, frame("toolu_t", at(1*time.Second), func(f *capture.Frame) { f.TurnID = turn2 }))
		require.Equal(t, turn2, *s.one(t, execE, "toolu_t").TurnID, "NULL filled forward")

		s.record(t, frame("toolu_t", at(2*time.Second), func(f *capture.Frame) { f.TurnID = turn1 }))
		s.record(t, frame("toolu_t", at(3*time.Second), noTurn))
		require.Equal(t, turn2, *s.one(t, execE, "toolu_t").TurnID, "first non-empty turn wins")
		require.Equal(t, 1, s.count(t, "1 = 1"), "AC-3: one row")
	})
}

// AC-3, AC-4, AC-5: later frames update the same row; a reported value
// replaces, an absent (empty) one never blanks. Every free column is covered.
func TestRecord_AC4_AC5_FillForwardAndReplace(t *testing.T) {
	full := func(v string) func(*capture.Frame) {
		return func(f *capture.Frame) {
			f.ParentToolCallID = "parent-" + v
			f.ToolStatus = "in_progress-" + v
			f.Subagent = capture.SubagentTask{Description: "desc-" + v, SubagentType: "type-" + v, Status: "status-" + v,
				AgentID: "agent-" + v, Model: "model-" + v, ChildSessionID: "child-" + v}
		}
	}
	eachStore(t, func(t *testing.T, s *store) {
		s.record(t, frame("toolu_m", at(0), full("1")))
		s.record(t, frame("toolu_m", at(time.Second))) // every optional field absent
		r := s.one(t, execE, "toolu_m")
		want := []*string{r.ParentToolCallID, r.ToolStatus, r.Description, r.SubagentType, r.AgentStatus, r.AgentID, r.Model, r.ChildSessionID}
		for i, v := range []string{"parent-1", "in_progress-1", "desc-1", "type-1", "status-1", "agent-1", "model-1", "child-1"} {
			require.NotNil(t, want[i], v)
			require.Equal(t, v, *want[i], "AC-4: absent never blanks")
		}

		s.record(t, frame("toolu_m", at(2*time.Second), full("2")))
		r = s.one(t, execE, "toolu_m")
		got := []*string{r.ParentToolCallID, r.ToolStatus, r.Description, r.SubagentType, r.AgentStatus, r.AgentID, r.Model, r.ChildSessionID}
		for i, v := range []string{"parent-2", "in_progress-2", "desc-2", "type-2", "status-2", "agent-2", "model-2", "child-2"} {
			require.Equal(t, v, *got[i], "AC-5: reported value replaces")
		}
		require.Equal(t, 1, s.count(t, "1 = 1"), "AC-3")
	})
}

// AC-5's write-once rows: task_id, source, observed_at never follow a later
// frame; updated_at is the write time of the latest write.
func TestRecord_AC5_WriteOnceColumnsAndUpdatedAt(t *testing.T) {
	eachStore(t, func(t *testing.T, s *store) {
		clock := at(time.Hour)
		s.w = writer(t, s.DB.DB, s.Dialect, capture.WithClock(func() time.Time { return clock }))
		s.record(t, frame("toolu_w", at(0)))
		clock = at(2 * time.Hour)
		s.record(t, frame("toolu_w", at(time.Minute), func(f *capture.Frame) { f.TaskID = "task-other" }))
		r := s.one(t, execE, "toolu_w")
		require.Equal(t, taskA, r.TaskID)
		require.True(t, r.ObservedAt.Equal(at(0)))
		require.True(t, r.UpdatedAt.Equal(at(2*time.Hour)), "updated_at is the last write: %v", r.UpdatedAt)

		// A frame without an observation time is observed at the write time.
		s.record(t, frame("toolu_now", time.Time{}))
		require.True(t, s.one(t, execE, "toolu_now").ObservedAt.Equal(at(2*time.Hour)))
	})
}

// Column-level normalization: an empty string is stored as NULL in every
// nullable TEXT column; prompt, result_text and output_file are not stored.
func TestRecord_EmptyStringsAreNullAndContentIsNotStored(t *testing.T) {
	eachStore(t, func(t *testing.T, s *store) {
		s.record(t, frame("toolu_e", at(0), func(f *capture.Frame) {
			f.TurnID = ""
			f.Subagent = capture.SubagentTask{Prompt: "SECRET-PROMPT", ResultText: "SECRET-RESULT", OutputFile: "/tmp/SECRET-OUT", CanReadOutputFile: true}
		}))
		require.Equal(t, 1, s.count(t, `turn_id IS NULL AND parent_tool_call_id IS NULL AND subagent_type IS NULL
			AND description IS NULL AND agent_id IS NULL AND child_session_id IS NULL AND model IS NULL
			AND agent_status IS NULL AND tool_status IS NULL`))
		for _, v := range s.raw(t, sessA, execE, "toolu_e") {
			require.NotContains(t, v.String, "SECRET")
		}
	})
}

// "The one shape a builder must not get wrong": an async_launched payload
// arrives with all three metrics 0/absent; all three are stored NULL, none 0.
// It settles through tool_status like any other (AC-11) and is_async sticks.
func TestRecord_AC7_AsyncLaunchedShapeMetricsAreNull(t *testing.T) {
	eachStore(t, func(t *testing.T, s *store) {
		s.record(t,
			frame("toolu_async", at(0), func(f *capture.Frame) {
				f.ToolStatus = "in_progress"
				f.Subagent = capture.SubagentTask{Description: "scan", SubagentType: "security-reviewer"}
			}),
			frame("toolu_async", at(time.Second), func(f *capture.Frame) {
				f.ToolStatus = "completed"
				f.Subagent = capture.SubagentTask{Status: "async_launched", AgentID: "a1b2", Model: "claude-opus-5[1m]",
					IsAsync: true, OutputFile: "/tmp/out", TotalTokens: 0, DurationMs: 0, ToolUseCount: nil}
			}))
		require.Equal(t, 1, s.count(t, "total_tokens IS NULL AND tool_use_count IS NULL AND duration_ms IS NULL"))
		require.Equal(t, 0, s.count(t, "total_tokens = 0 OR tool_use_count = 0 OR duration_ms = 0"))
		r := s.one(t, execE, "toolu_async")
		require.True(t, r.IsAsync)
		require.Equal(t, "async_launched", *r.AgentStatus)
		require.True(t, r.SettledAt.Equal(at(time.Second)))
	})
}

// AC-7a: a reported 0 for total_tokens / duration_ms is "not reported": NULL
// on creation, and a later 0 never blanks a learned value.
func TestRecord_AC7a_ZeroTokensAndDurationAreNotReported(t *testing.T) {
	eachStore(t, func(t *testing.T, s *store) {
		zero := func(f *capture.Frame) { f.Subagent.TotalTokens, f.Subagent.DurationMs = 0, 0 }
		s.record(t, frame("toolu_z", at(0), zero))
		require.Equal(t, 1, s.count(t, "total_tokens IS NULL AND duration_ms IS NULL"))

		s.record(t, frame("toolu_z", at(time.Second), func(f *capture.Frame) {
			f.Subagent.TotalTokens, f.Subagent.DurationMs = 275717, 93000
		}))
		s.record(t, frame("toolu_z", at(2*time.Second), zero))
		r := s.one(t, execE, "toolu_z")
		require.Equal(t, int64(275717), *r.TotalTokens, "later zero never blanks")
		require.Equal(t, int64(93000), *r.DurationMs, "later zero never blanks")
		require.Zero(t, s.w.Counters().AnomalousValue, "zero is not anomalous")
	})
}

// AC-8 vs AC-7: a reported-zero tool_use_count is stored 0; an absent one NULL.
func TestRecord_AC8_ReportedZeroToolUseCountIsZero(t *testing.T) {
	eachStore(t, func(t *testing.T, s *store) {
		s.record(t,
			frame("toolu_zero", at(0), func(f *capture.Frame) { f.Subagent.ToolUseCount = intp(0) }),
			frame("toolu_absent", at(0)))
		require.Equal(t, 1, s.count(t, "tool_call_id = 'toolu_zero' AND tool_use_count = 0"))
		require.Equal(t, 1, s.count(t, "tool_call_id = 'toolu_absent' AND tool_use_count IS NULL"))

		// A later absent count never blanks the reported zero.
		s.record(t, frame("toolu_zero", at(time.Second)))
		require.Equal(t, int64(0), *s.one(t, execE, "toolu_zero").ToolUseCount)
	})
}

// AC-9: a negative metric is stored NULL on creation, never blanks a learned
// value, leaves the frame's other fields written, and counts anomalous_value
// once per frame either way.
func TestRecord_AC9_NegativeMetricIsAnomalous(t *testing.T) {
	eachStore(t, func(t *testing.T, s *store) {
		s.record(t, frame("toolu_neg", at(0), func(f *capture.Frame) {
			f.Subagent = capture.SubagentTask{TotalTokens: -1, DurationMs: -2, ToolUseCount: intp(-3), Model: "m1"}
		}))
		r := s.one(t, execE, "toolu_neg")
		require.Nil(t, r.TotalTokens)
		require.Nil(t, r.DurationMs)
		require.Nil(t, r.ToolUseCount)
		require.Equal(t, "m1", *r.Model, "other fields unaffected")
		require.Equal(t, int64(1), s.w.Counters().AnomalousValue, "one frame, one count")

		s.record(t, frame("toolu_neg", at(time.Second), func(f *capture.Frame) {
			f.Subagent = capture.SubagentTask{TotalTokens: 5000, DurationMs: 700, ToolUseCount: intp(3)}
		}))
		s.record(t, frame("toolu_neg", at(2*time.Second), func(f *capture.Frame) {
			f.Subagent = capture.SubagentTask{TotalTokens: -1, DurationMs: -1, ToolUseCount: intp(-1), Model: "m2"}
		}))
		r = s.one(t, execE, "toolu_neg")
		require.Equal(t, int64(5000), *r.TotalTokens, "later negative never blanks")
		require.Equal(t, int64(700), *r.DurationMs)
		require.Equal(t, int64(3), *r.ToolUseCount)
		require.Equal(t, "m2", *r.Model)
		require.Equal(t, capture.Counters{Attempted: 3, Persisted: 3, AnomalousValue: 2}, s.w.Counters())
	})
}

// AC-10, AC-10a, AC-11: an unrecognised agent_status is stored verbatim and
// never settles; neither does a terminal-sounding agent_status while the ACP
// tool status is not terminal. A row never seen terminal stays unsettled.
func TestRecord_AC10a_AgentStatusNeverSettles(t *testing.T) {
	eachStore(t, func(t *testing.T, s *store) {
		s.record(t,
			frame("toolu_odd", at(0), func(f *capture.Frame) { f.Subagent.Status = "hibernating-7" }),
			frame("toolu_agentdone", at(0), func(f *capture.Frame) {
				f.ToolStatus = "in_progress"
				f.Subagent.Status = "completed"
			}))
		r := s.one(t, execE, "toolu_odd")
		require.Equal(t, "hibernating-7", *r.AgentStatus)
		require.Nil(t, r.SettledAt)
		require.Nil(t, r.ToolStatus)
		r = s.one(t, execE, "toolu_agentdone")
		require.Nil(t, r.SettledAt, "agent_status never decides settlement")
		require.Equal(t, "in_progress", *r.ToolStatus)
	})
}

// AC-11, AC-12: settled_at is the first terminal observation and never moves;
// tool_status freezes at that terminal value — and only those two freeze: a
// post-settlement non-terminal frame still replaces model (AC-5).
func TestRecord_AC11_AC12_SettlementFreezesOnlyStatusAndSettledAt(t *testing.T) {
	for _, terminal := range toolstatus.Terminal {
		t.Run(terminal, func(t *testing.T) {
			eachStore(t, func(t *testing.T, s *store) {
				s.record(t,
					frame("toolu_s", at(0), func(f *capture.Frame) { f.ToolStatus = "pending" }),
					frame("toolu_s", at(time.Second), func(f *capture.Frame) {
						f.ToolStatus = terminal
						f.Subagent.Model = "model-before"
					}))
				r := s.one(t, execE, "toolu_s")
				require.True(t, r.SettledAt.Equal(at(time.Second)), "AC-11: settled at the terminal observation")

				s.record(t,
					frame("toolu_s", at(2*time.Second), func(f *capture.Frame) {
						f.ToolStatus = "in_progress"
						f.Subagent.Model = "model-after"
						f.Subagent.Description = "late description"
					}),
					frame("toolu_s", at(3*time.Second), func(f *capture.Frame) { f.ToolStatus = "error" }))
				r = s.one(t, execE, "toolu_s")
				require.Equal(t, terminal, *r.ToolStatus, "AC-12: tool_status frozen at the first terminal value")
				require.True(t, r.SettledAt.Equal(at(time.Second)), "AC-11: settled_at write-once")
				require.Equal(t, "model-after", *r.Model, "AC-12/AC-5: replace continues after settlement")
				require.Equal(t, "late description", *r.Description)
			})
		})
	}
}

// AC-12 on a row an older writer left terminal with settled_at NULL: a late
// non-terminal frame must not unsettle it, and AC-5 still fills the rest.
func TestRecord_AC12_StoredTerminalStatusFreezesWithoutSettledAt(t *testing.T) {
	eachStore(t, func(t *testing.T, s *store) {
		s.Exec(t, `INSERT INTO task_session_subagents (id, task_session_id, task_id, agent_execution_id, tool_call_id, tool_status, observed_at, updated_at)
 VALUES ('legacy-1', 'sess-a', 'task-a', 'unknown', 'toolu_legacy', 'completed', '2026-07-30 01:00:00+00:00', '2026-07-30 01:00:00+00:00')`)
		s.record(t, capture.Frame{SessionID: sessA, TaskID: taskA, ToolCallID: "toolu_legacy", ToolStatus: "in_progress",
			ObservedAt: at(0), Subagent: capture.SubagentTask{Model: "claude-opus-5[1m]"}})
		r := s.one(t, "unknown", "toolu_legacy")
		require.Equal(t, "completed", *r.ToolStatus)
		require.Nil(t, r.SettledAt, "no settlement instant is fabricated")
		require.Equal(t, "claude-opus-5[1m]", *r.Model)
	})
}

// is_async is sticky: set on a positive report, never back to 0.
func TestRecord_IsAsyncIsSticky(t *testing.T) {
	eachStore(t, func(t *testing.T, s *store) {
		s.record(t, frame("toolu_a", at(0)))
		require.False(t, s.one(t, execE, "toolu_a").IsAsync)
		s.record(t, frame("toolu_a", at(time.Second), func(f *capture.Frame) { f.Subagent.IsAsync = true }))
		s.record(t, frame("toolu_a", at(2*time.Second)))
		require.True(t, s.one(t, execE, "toolu_a").IsAsync)
	})
}

// AC-6: a nested subagent is written with its parent tool-call id.
func TestRecord_AC6_NestedIsWritten(t *testing.T) {
	eachStore(t, func(t *testing.T, s *store) {
		s.record(t,
			frame("toolu_parent", at(0)),
			frame("toolu_child", at(time.Second), func(f *capture.Frame) { f.ParentToolCallID = "toolu_parent" }))
		require.Equal(t, "toolu_parent", *s.one(t, execE, "toolu_child").ParentToolCallID)
		require.Nil(t, s.one(t, execE, "toolu_parent").ParentToolCallID)
	})
}
