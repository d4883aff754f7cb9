package transcript

import (
	"encoding/json"
	"fmt"
)

// openCodeNormalizer reads the OpenCode server's event bus (GET /event, one
// JSON payload per SSE data line):
//
//	{"type":"message.updated","properties":{"info":{"id":…,"role":"user"|"assistant","modelID":…,"error":…}}}
//	{"type":"message.part.updated","properties":{"part":{"id":…,"messageID":…,"type":"text","text":…,"time":{"end":…}},"delta":…}}
//	{"type":"message.part.updated","properties":{"part":{"type":"tool","callID":…,"tool":…,"state":{"status":"pending"|"running"|"completed"|"error",…}}}}
//	{"type":"session.error","properties":{"error":{"name":…,"data":{"message":…}}}}
//	{"type":"session.idle","properties":{"sessionID":…}}
//
// The stream carries the events of every session the server runs. Given the
// child's session id (WithSession), an event that names another session —
// properties.sessionID, properties.info.sessionID of a message, or
// properties.part.sessionID of a part — is not the child's and is dropped.
// An event that names no session (server.connected; a session.error the
// server raises outside any session, such as a skill that fails to parse) is
// kept: it may concern the child, and a failure is never dropped into a
// success. Without a session id every session's events are kept, so a
// server shared by several children mixes them.
//
// Parts are re-sent whole on every update. A text part is emitted once, when
// its time.end arrives (or at session.idle / Close if it never does); a tool
// part's call is emitted when its input is known (running or later), its
// result when the state is completed or error.
type openCodeNormalizer struct {
	session string            // the child's session id; "" keeps every session
	roles   map[string]string // message id → role
	texts   map[string]*ocPart
	order   []string // text part ids, first-seen order
	emitted map[string]bool
	called  map[string]bool
	results map[string]bool
	pending map[string]*ocPart // call id → latest part seen while pending
	pendOrd []string           // call ids in first-seen pending order
	out     Outcome
	failed  bool
	idle    bool
}

func newOpenCodeNormalizer(session string) *openCodeNormalizer {
	return &openCodeNormalizer{session: session, roles: map[string]string{}, texts: map[string]*ocPart{},
		emitted: map[string]bool{}, called: map[string]bool{}, results: map[string]bool{},
		pending: map[string]*ocPart{}}
}

type ocError struct {
	Name string `json:"name"`
	Data struct {
		Message string `json:"message"`
	} `json:"data"`
}

func (e *ocError) String() string {
	if e.Data.Message == "" {
		return e.Name
	}
	return e.Name + ": " + e.Data.Message
}

type ocPart struct {
	ID        string `json:"id"`
	MessageID string `json:"messageID"`
	Type      string `json:"type"`
	Text      string `json:"text"`
	Synthetic bool   `json:"synthetic"`
	Time      *struct {
		End *int64 `json:"end"`
	} `json:"time"`
	SessionID string `json:"sessionID"`
	CallID    string `json:"callID"`
	Tool      string `json:"tool"`
	State     *struct {
		Status string          `json:"status"`
		Input  json.RawMessage `json:"input"`
		Output string          `json:"output"`
		Error  string          `json:"error"`
	} `json:"state"`
}

type ocEvent struct {
	Type       string `json:"type"`
	Properties struct {
		SessionID string `json:"sessionID"`
		Info      *struct {
			ID        string   `json:"id"`
			SessionID string   `json:"sessionID"`
			Role      string   `json:"role"`
			ModelID   string   `json:"modelID"`
			Error     *ocError `json:"error"`
		} `json:"info"`
		Part  *ocPart  `json:"part"`
		Error *ocError `json:"error"`
	} `json:"properties"`
}

func (o *openCodeNormalizer) Feed(b []byte) ([]Event, error) {
	b, ok := record(b)
	if !ok {
		return nil, nil
	}
	var ev ocEvent
	if err := json.Unmarshal(b, &ev); err != nil {
		return nil, err
	}
	if sid := ev.sessionID(); o.session != "" && sid != "" && sid != o.session {
		return nil, nil // another session's event on the same server
	}
	switch ev.Type {
	case "message.updated":
		if info := ev.Properties.Info; info != nil {
			o.roles[info.ID] = info.Role
			if info.ModelID != "" {
				o.out.Model = info.ModelID
			}
			if info.Error != nil {
				o.fail(info.Error.String())
			}
		}
	case "message.part.updated":
		if p := ev.Properties.Part; p != nil {
			return o.part(p)
		}
	case "session.error":
		if e := ev.Properties.Error; e != nil {
			o.fail(e.String())
		} else {
			o.fail("session.error")
		}
	case "session.idle":
		o.idle = true
		return o.flushTexts(), nil
	}
	return nil, nil
}

// sessionID is the session an event names, wherever its shape carries it
// ("" if it names none).
func (ev *ocEvent) sessionID() string {
	p := ev.Properties
	switch {
	case p.SessionID != "":
		return p.SessionID
	case p.Info != nil && p.Info.SessionID != "":
		return p.Info.SessionID
	case p.Part != nil:
		return p.Part.SessionID
	}
	return ""
}

func (o *openCodeNormalizer) fail(msg string) {
	if !o.failed {
		o.failed, o.out.Error = true, msg
	}
}

func (o *openCodeNormalizer) part(p *ocPart) ([]Event, error) {
	switch p.Type {
	case "text":
		if p.Synthetic || o.emitted[p.ID] {
			return nil, nil
		}
		if _, seen := o.texts[p.ID]; !seen {
			o.order = append(o.order, p.ID)
		}
		o.texts[p.ID] = p
		if p.Time != nil && p.Time.End != nil || o.roles[p.MessageID] == "user" {
			return o.emitText(p.ID), nil
		}
	case "tool":
		if p.State == nil || p.CallID == "" {
			return nil, fmt.Errorf("tool part %s without callID or state", p.ID)
		}
		var out []Event
		s := p.State
		if s.Status == "pending" && !o.called[p.CallID] {
			if _, seen := o.pending[p.CallID]; !seen {
				o.pendOrd = append(o.pendOrd, p.CallID)
			}
			o.pending[p.CallID] = p
		}
		if s.Status != "pending" && !o.called[p.CallID] {
			o.called[p.CallID] = true
			out = append(out, toolCall(p.CallID, p.Tool, s.Input))
		}
		if (s.Status == "completed" || s.Status == "error") && !o.results[p.CallID] {
			o.results[p.CallID] = true
			out = append(out, toolResult(p.CallID, s.Output, s.Status == "error", s.Error))
		}
		return out, nil
	}
	return nil, nil
}

func (o *openCodeNormalizer) emitText(id string) []Event {
	p := o.texts[id]
	o.emitted[id] = true
	if p.Text == "" {
		return nil
	}
	if o.roles[p.MessageID] == "user" {
		return []Event{userMessage(p.Text)}
	}
	return []Event{assistantMessage(p.Text)}
}

func (o *openCodeNormalizer) flushTexts() []Event {
	var out []Event
	for _, id := range o.order {
		if !o.emitted[id] {
			out = append(out, o.emitText(id)...)
		}
	}
	return out
}

func (o *openCodeNormalizer) Close() ([]Event, Outcome) {
	out := o.flushTexts()
	// A call still pending when the stream ended was made but never ran:
	// it is kept, without a result.
	for _, id := range o.pendOrd {
		if p := o.pending[id]; !o.called[id] {
			o.called[id] = true
			out = append(out, toolCall(id, p.Tool, p.State.Input))
		}
	}
	res := o.out
	for i := len(o.order) - 1; i >= 0; i-- {
		if p := o.texts[o.order[i]]; o.roles[p.MessageID] == "assistant" && p.Text != "" {
			res.FinalText = p.Text
			break
		}
	}
	switch {
	case o.failed:
		res.Status = Failed
	case o.idle:
		res.Status = Completed
	default:
		u := unterminated(ProviderOpenCode)
		res.Status, res.Error = u.Status, u.Error
	}
	return out, res
}
