package capture

import "time"

// Frame is one observed subagent tool-call frame: the identity the orchestrator
// resolved for it and the typed subagent payload it carried. An empty string
// means "not reported" everywhere, as on the wire.
type Frame struct {
	SessionID        string
	TaskID           string
	TurnID           string
	ExecutionID      string // the lifecycle execution that emitted the frame; "" → 'unknown' (AC-31)
	ToolCallID       string
	ParentToolCallID string
	// ToolStatus is the ACP status of the launching tool call; it alone
	// decides settlement (AC-11).
	ToolStatus string
	// ObservedAt is when the frame was observed; the zero time means "now".
	ObservedAt time.Time
	Subagent   SubagentTask

	// dropped are the descriptive fields ParseFrame found holding text that
	// cannot be stored exactly (the decoder had already replaced it), left
	// "" here; Record stores them NULL, counts and logs them.
	dropped []droppedText
}

// SubagentTask is the subagent payload as parsed. Prompt, ResultText and
// OutputFile are carried because the payload carries them, and are never
// stored: the table is structure, not content (spec: Data model).
type SubagentTask struct {
	Description    string
	Prompt         string
	SubagentType   string
	Status         string // agent_status: the agent's own report, stored verbatim (AC-10a)
	AgentID        string
	Model          string
	ChildSessionID string
	// DurationMs and TotalTokens are plain values: 0 cannot be told apart from
	// "not reported", so 0 is read as not reported (AC-7a).
	DurationMs  int64
	TotalTokens int64
	// ToolUseCount is nil when not reported; a pointer to 0 is a reported
	// zero and is stored as 0 (AC-8).
	ToolUseCount      *int
	ResultText        string
	IsAsync           bool
	OutputFile        string
	CanReadOutputFile bool
}

// UnknownExecution is the one reserved execution-id sentinel (AC-31), shared
// with the backfill and with rows that predate the execution dimension.
const UnknownExecution = "unknown"

// SourceLive is the provenance of rows this writer creates (AC-1).
const SourceLive = "live"
