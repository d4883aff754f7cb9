package gen

import (
	"fmt"
	"time"

	"github.com/schemastate/schemastate/internal/instant"
)

// session streams one session: its row, then turn by turn a user message,
// the agent's messages and, in a fan-out turn, one tool-call message per
// subagent invocation. created_at increases strictly within the session at
// microsecond precision.
func (g *generator) session(si int, sp sessionPlan, start time.Time) error {
	rng := g.rng
	sessionID, taskID, execution := newUUID(rng), newUUID(rng), newUUID(rng)
	if err := g.w.exec(`INSERT INTO task_sessions (id, task_id, state, created_at, updated_at) VALUES (?, ?, ?, ?, ?)`,
		sessionID, taskID, "COMPLETED", g.at(start), g.at(start)); err != nil {
		return err
	}
	g.sum.Sessions++
	n := 0
	for _, t := range sp.turns {
		n += 1 + t.agent + t.fanOut
	}
	meanGap := int64(g.plan.sessionBudget()/time.Microsecond) / int64(n)
	if meanGap < 2 {
		meanGap = 2
	}
	now := start
	tick := func() time.Time {
		now = now.Add(time.Duration(1+rng.Int64N(2*meanGap)) * time.Microsecond)
		return now
	}
	for _, tp := range sp.turns {
		turnID := newUUID(rng)
		began := tick()
		if err := g.message(sessionID, taskID, turnID, "user", "message", g.text.slice(rng, userSize(rng)), g.plainMeta(), began, began); err != nil {
			return err
		}
		before := 1
		if tp.fanOut > 0 && tp.agent > 1 {
			before = 1 + rng.IntN(tp.agent-1)
		}
		for i := 0; i < tp.agent; i++ {
			if i == before && tp.fanOut > 0 {
				if err := g.fanOut(tp, sessionID, taskID, turnID, execution, tick); err != nil {
					return err
				}
			}
			if err := g.agentMessage(sessionID, taskID, turnID, tick()); err != nil {
				return err
			}
		}
		if tp.fanOut > 0 && before >= tp.agent {
			if err := g.fanOut(tp, sessionID, taskID, turnID, execution, tick); err != nil {
				return err
			}
		}
		if err := g.w.add(g.turns, 0, turnID, sessionID, taskID, g.at(began), g.at(now), "{}", g.at(began), g.at(now)); err != nil {
			return err
		}
		g.sum.Turns++
	}
	return nil
}

func (g *generator) at(t time.Time) any { return instant.RowTime(g.d, t) }

// plainMeta is an ordinary message's metadata: '{}', and now and then one
// of the forms older hosts left behind (NULL, the empty string, 'null').
func (g *generator) plainMeta() any {
	switch r := g.rng.IntN(1000); {
	case r < 4:
		return nil
	case r < 8:
		return ""
	case r < 12:
		return "null"
	}
	return "{}"
}

func (g *generator) message(sessionID, taskID, turnID, author, typ, content string, meta any, created, updated time.Time) error {
	size := len(content)
	if s, ok := meta.(string); ok {
		size += len(s)
	}
	authorID := any(nil)
	if author == "user" {
		authorID = "user-1"
	}
	if err := g.w.add(g.messages, size, newUUID(g.rng), sessionID, taskID, turnID, author, authorID, content, 0, typ, meta, g.at(created), g.at(updated)); err != nil {
		return err
	}
	g.sum.Messages++
	g.sum.ContentBytes += int64(size)
	return nil
}

// agentMessage is an agent reply or, for toolCallPercent of them, an
// ordinary tool call carrying tool metadata (never a subagent).
func (g *generator) agentMessage(sessionID, taskID, turnID string, at time.Time) error {
	rng := g.rng
	if rng.IntN(100) < toolCallPercent {
		kind := toolKinds[rng.IntN(len(toolKinds))]
		meta := fmt.Sprintf(`{"tool_call_id":%q,"status":"completed","normalized":{"kind":%q,%q:{"path":"internal/%s.go"}}}`,
			toolCallID(rng), kind, kind, vocabulary[rng.IntN(len(vocabulary))])
		return g.message(sessionID, taskID, turnID, "agent", "tool_call", g.text.slice(rng, toolSize(rng)), meta, at, at)
	}
	return g.message(sessionID, taskID, turnID, "agent", "message", g.text.slice(rng, agentSize(rng)), g.plainMeta(), at, at)
}

// fanOut writes one turn's subagent invocations, and the
// task_session_subagents rows the state calls for.
func (g *generator) fanOut(tp turnPlan, sessionID, taskID, turnID, execution string, tick func() time.Time) error {
	rng := g.rng
	var first string
	for j := 0; j < tp.fanOut; j++ {
		inv := g.plan.invocations[tp.first+j]
		m := subagentMeta{ToolCallID: toolCallID(rng), Status: toolStatusFor(inv.status)}
		if j == 0 {
			first = m.ToolCallID
		}
		if inv.nestedLast {
			m.ParentToolCallID = first
		}
		st := &m.Normalized.SubagentTask
		m.Normalized.Kind = "subagent_task"
		st.Status = inv.status
		if !inv.missingType {
			st.SubagentType = subagentTypes[rng.IntN(len(subagentTypes))]
		}
		st.Description = "Review " + g.text.slice(rng, 24+rng.IntN(40))
		created := tick()
		updated := created
		switch inv.status {
		case StatusAsyncLaunched:
			st.AgentID = "a" + newUUID(rng)[:17]
			st.Model = models[rng.IntN(len(models))]
			st.IsAsync = true
			updated = created.Add(time.Duration(50+rng.IntN(500)) * time.Millisecond)
		case StatusCompleted:
			st.AgentID = "a" + newUUID(rng)[:17]
			if inv.withModel {
				st.Model = models[rng.IntN(len(models))]
			}
			st.TotalTokens = inv.tokens
			uses := int64(1 + rng.IntN(80))
			st.ToolUseCount = &uses
			st.DurationMs = int64(5000 + rng.IntN(600000))
			updated = created.Add(time.Duration(st.DurationMs) * time.Millisecond)
		case StatusStarted:
			st.ChildSessionID = "ses_" + toolCallID(rng)[8:]
		}
		meta := m.json()
		if err := g.message(sessionID, taskID, turnID, "agent", "tool_call", st.Description, meta, created, updated); err != nil {
			return err
		}
		g.sum.SubagentMessages++
		if err := g.subagentRow(m, sessionID, taskID, turnID, execution, created, updated); err != nil {
			return err
		}
	}
	return nil
}

// subagentRow writes the row the state's writer would have written for one
// invocation: legacy — a pre-amendment backfill row before the activation
// instant and a live row after it; amended — a live row with the session's
// real execution id for post-activation sessions (the earlier ones are the
// reconcile's backfill). Predating writes none.
func (g *generator) subagentRow(m subagentMeta, sessionID, taskID, turnID, execution string, created, updated time.Time) error {
	source := "live"
	switch g.cfg.State {
	case Predating:
		return nil
	case Legacy:
		if created.Before(g.plan.activation()) {
			source = "backfill"
			if created.After(g.lastBefore) {
				g.lastBefore = created
			}
		}
	case Amended:
		if !g.activated {
			return nil
		}
	}
	st := m.Normalized.SubagentTask
	var settled any
	if m.Status == "completed" {
		settled = g.at(updated)
	}
	row := map[string]any{"id": newUUID(g.rng), "task_session_id": sessionID, "task_id": taskID, "turn_id": turnID,
		"agent_execution_id": execution, "tool_call_id": m.ToolCallID, "parent_tool_call_id": null(m.ParentToolCallID),
		"subagent_type": null(st.SubagentType), "description": null(st.Description), "agent_id": null(st.AgentID),
		"child_session_id": null(st.ChildSessionID), "model": null(st.Model), "agent_status": null(st.Status),
		"tool_status": m.Status, "is_async": boolInt(st.IsAsync), "total_tokens": positive(st.TotalTokens),
		"tool_use_count": ptr(st.ToolUseCount), "duration_ms": positive(st.DurationMs), "source": source,
		"observed_at": g.at(created), "settled_at": settled, "updated_at": g.at(updated)}
	cols := g.subagentRows.cols
	vals := make([]any, len(cols))
	for i, c := range cols {
		v, ok := row[c]
		if !ok {
			return fmt.Errorf("gen: no value for the declared column %s.%s", g.subagentRows.name, c)
		}
		vals[i] = v
	}
	if source == "live" {
		g.sum.LiveRows++
	} else {
		g.sum.BackfillRows++
	}
	return g.w.add(g.subagentRows, 0, vals...)
}

func null(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func positive(v int64) any {
	if v <= 0 {
		return nil
	}
	return v
}

func ptr(v *int64) any {
	if v == nil {
		return nil
	}
	return *v
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
