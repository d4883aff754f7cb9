package normalize

import (
	"encoding/json"
	"fmt"
)

// openCodeNormalizer reads the two shapes OpenCode writes. The first is what
// `opencode run --format json` prints, one line per finished part or error
// of its own session (the part is the bus's part, below):
//
//	{"type":"step_start","timestamp":…,"sessionID":…,"part":{"type":"step-start",…}}
//	{"type":"text","timestamp":…,"sessionID":…,"part":{"type":"text","text":…,"time":{"end":…},…}}
//	{"type":"tool_use","timestamp":…,"sessionID":…,"part":{"type":"tool","callID":…,"tool":…,"state":{"status":"completed"|"error",…}}}
//	{"type":"step_finish","timestamp":…,"sessionID":…,"part":{"type":"step-finish","reason":"stop"|"tool-calls"|…,…}}
//	{"type":"error","timestamp":…,"sessionID":…,"error":{"name":"APIError","data":{"message":…,"statusCode":…}}}
//
// `opencode run` has no terminal line: the run completed when its last step
// finished for a reason other than "tool-calls" and no error was printed; a
// stream that stops inside a step, or after a step that asked for tools, was
// cut off.
//
// The second is the OpenCode server's event bus (GET /event, one JSON
// payload per SSE data line; GET /global/event wraps each as
// {"directory":…,"payload":{…}}, unwrapped here):
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
// its time.end arrives (or at session.idle / Close if it never does), and is
// not kept once emitted: memory holds only the parts still open, never the
// whole stream. A tool part's call is emitted when its input is known
// (running or later), its result when the state is completed or error. The
// final response is the text of the child's last text part (by first
// appearance) emitted as an assistant message.
type openCodeNormalizer struct {
	tally
	session string             // the child's session id; "" keeps every session
	roles   map[string]string  // message id → role
	texts   map[string]*ocPart // text parts not emitted yet
	order   map[string]int     // text part id → first-seen position
	open    []string           // ids of the parts in texts, first-seen order
	emitted map[string]bool
	// final is the text of the last assistant text emitted, by first-seen
	// position (finalAt).
	final   string
	finalAt int
	called  map[string]bool
	results map[string]bool
	pending map[string]*ocPart // call id → latest part seen while pending
	pendOrd []string           // call ids in first-seen pending order
	out     Outcome
	failed  bool
	idle    bool
	// run: a `opencode run --format json` line was seen; stepOpen: a step
	// started and has not finished; lastFinish: the last step's reason.
	run        bool
	stepOpen   bool
	lastFinish string
}

func newOpenCodeNormalizer(session string) *openCodeNormalizer {
	return &openCodeNormalizer{session: session, roles: map[string]string{}, texts: map[string]*ocPart{},
		order: map[string]int{}, emitted: map[string]bool{}, called: map[string]bool{}, results: map[string]bool{},
		pending: map[string]*ocPart{}, finalAt: -1}
}

type ocError struct {
	Name string `json:"name"`
	Data struct {
		Message    string `json:"message"`
		StatusCode int    `json:"statusCode"`
	} `json:"data"`
}

func (e *ocError) String() string {
	s := e.Name
	if s == "" {
		s = "error"
	}
	if e.Data.Message != "" {
		s += ": " + e.Data.Message
	}
	if e.Data.StatusCode != 0 {
		s += fmt.Sprintf(" (status %d)", e.Data.StatusCode)
	}
	return s
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
	Reason    string `json:"reason"` // step-finish
	State     *struct {
		Status string          `json:"status"`
		Input  json.RawMessage `json:"input"`
		Output string          `json:"output"`
		Error  string          `json:"error"`
	} `json:"state"`
}

type ocEvent struct {
	Type string `json:"type"`
	// SessionID, Part and Error are `opencode run --format json`'s.
	SessionID  string          `json:"sessionID"`
	Part       *ocPart         `json:"part"`
	Error      *ocError        `json:"error"`
	Payload    json.RawMessage `json:"payload"` // /global/event's wrapper
	Properties *struct {
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

// ocRunTypes are the line types `opencode run --format json` prints.
var ocRunTypes = map[string]bool{"step_start": true, "step_finish": true, "text": true, "tool_use": true, "reasoning": true, "error": true}

// openCodeRecognizes: a run line, a bus event (a type and properties), or
// /global/event's wrapper.
func openCodeRecognizes(p *probe) bool {
	run := ocRunTypes[p.Type] && (p.SessionIDC != "" || len(p.Part) > 0 || len(p.Error) > 0)
	return run || p.Type != "" && len(p.Properties) > 0 || p.Type == "" && len(p.Payload) > 0
}

func (o *openCodeNormalizer) Feed(b []byte) ([]Event, error) {
	return feedRecord(&o.tally, b, openCodeRecognizes, o.handle)
}

// handle turns one OpenCode event into the child's events.
func (o *openCodeNormalizer) handle(ev *ocEvent) ([]Event, error) {
	if len(ev.Payload) > 0 && ev.Type == "" && ev.Properties == nil {
		// {"directory":…,"payload":{…}}: a bus event of /global/event.
		if b, kind := record(ev.Payload); kind == lineObject {
			*ev = ocEvent{}
			if err := json.Unmarshal(b, ev); err != nil {
				return nil, fmt.Errorf("payload: %w", err)
			}
		}
	}
	isRun := ocRunTypes[ev.Type] && (ev.SessionID != "" || ev.Part != nil || ev.Error != nil)
	if sid := ev.sessionID(); o.session != "" && sid != "" && sid != o.session {
		return nil, nil // another session's event on the same server
	}
	if isRun {
		return o.runLine(ev)
	}
	if ev.Properties == nil {
		return nil, nil
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

// runLine reads one line of `opencode run --format json`.
func (o *openCodeNormalizer) runLine(ev *ocEvent) ([]Event, error) {
	o.run = true
	switch ev.Type {
	case "step_start":
		o.stepOpen = true
	case "step_finish":
		o.stepOpen = false
		if ev.Part != nil {
			o.lastFinish = ev.Part.Reason
		}
	case "error":
		if ev.Error != nil {
			o.fail(ev.Error.String())
		} else {
			o.fail("error")
		}
	case "text", "tool_use":
		if ev.Part != nil {
			return o.part(ev.Part)
		}
	}
	return nil, nil
}

// sessionID is the session an event names, wherever its shape carries it
// ("" if it names none).
func (ev *ocEvent) sessionID() string {
	if ev.SessionID != "" {
		return ev.SessionID
	}
	if ev.Part != nil && ev.Part.SessionID != "" {
		return ev.Part.SessionID
	}
	p := ev.Properties
	if p == nil {
		return ""
	}
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
			o.order[p.ID] = len(o.order)
			o.open = append(o.open, p.ID)
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
			delete(o.pending, p.CallID)
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

// emitText emits text part id and forgets its text.
func (o *openCodeNormalizer) emitText(id string) []Event {
	p := o.texts[id]
	o.emitted[id] = true
	delete(o.texts, id)
	if p.Text == "" {
		return nil
	}
	if o.roles[p.MessageID] == "user" {
		return []Event{userMessage(p.Text)}
	}
	if at := o.order[id]; at > o.finalAt {
		o.final, o.finalAt = p.Text, at
	}
	return []Event{assistantMessage(p.Text)}
}

// flushTexts emits every text part still open, in first-seen order.
func (o *openCodeNormalizer) flushTexts() []Event {
	var out []Event
	for _, id := range o.open {
		if !o.emitted[id] {
			out = append(out, o.emitText(id)...)
		}
	}
	o.open = o.open[:0]
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
	res.FinalText = o.final
	switch {
	case o.failed:
		res.Status = Failed
	case o.idle:
		res.Status = Completed
	case o.run && !o.stepOpen && o.lastFinish != "" && o.lastFinish != "tool-calls":
		res.Status = Completed
	default:
		u := unterminated(ProviderOpenCode)
		res.Status, res.Error = u.Status, u.Error
		if o.run {
			res.Error = "opencode run stream ended before its last step finished"
		}
	}
	return out, o.outcome(ProviderOpenCode, res)
}
