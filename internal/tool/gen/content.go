package gen

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"math/rand/v2"
	"strings"

	"github.com/google/uuid"
)

// vocabulary is what message text is made of: code-review prose, roughly the
// words an agent conversation is written in.
var vocabulary = strings.Fields(`the a to of and in is for that this with on it be as
function error test file return value should change review config handler request
response session turn agent subagent tool call status migration table index query
database schema column row backfill write read update delete create build run
check fix bug issue commit branch merge diff patch line code type struct field
method interface package import module go sql sqlite postgres json metadata
timestamp key lock transaction rollback commit retry timeout context cancel
log warn info debug trace span metric counter latency throughput memory cpu
I will now let me look at the implementation first then run tests again
done here is summary of changes made updated added removed renamed moved`)

// corpus is a fixed block of pseudo-prose built from the seed; every message
// body is a window into it, so producing hundreds of megabytes of text costs
// a slice operation per message and the store stays deterministic.
type corpus struct{ text string }

const corpusSize = 1 << 20

func newCorpus(rng *rand.Rand) corpus {
	var b strings.Builder
	b.Grow(corpusSize + 64)
	for b.Len() < corpusSize {
		b.WriteString(vocabulary[rng.IntN(len(vocabulary))])
		if rng.IntN(12) == 0 {
			b.WriteString(".\n")
		} else {
			b.WriteByte(' ')
		}
	}
	return corpus{text: b.String()}
}

func (c corpus) slice(rng *rand.Rand, n int) string {
	if n > corpusSize/2 {
		n = corpusSize / 2
	}
	if n < 1 {
		n = 1
	}
	off := rng.IntN(len(c.text) - n)
	return c.text[off : off+n]
}

// Message sizes: log-normal, the shape chat history has — most messages a
// few hundred bytes to a few kilobytes, a long tail of large tool output.
func userSize(rng *rand.Rand) int  { return logNormal(rng, 400, 1.0, 32<<10) }
func agentSize(rng *rand.Rand) int { return logNormal(rng, 1500, 1.3, 256<<10) }
func toolSize(rng *rand.Rand) int  { return logNormal(rng, 120, 0.6, 2<<10) }

func logNormal(rng *rand.Rand, median, sigma float64, max int) int {
	v := int(median * math.Exp(sigma*rng.NormFloat64()))
	if v < 8 {
		v = 8
	}
	if v > max {
		v = max
	}
	return v
}

// overheadPerMessage approximates the on-disk cost of a message beyond its
// content and metadata: ids, timestamps, the row header and five index
// entries (primary key, session, created_at, session+created_at, turn).
const overheadPerMessage = 880

// meanMessageBytes estimates the mean on-disk bytes of one message by
// sampling the same distributions the generator draws from.
func meanMessageBytes(seed uint64) float64 {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	const n = 20000
	total := 0
	for i := 0; i < n; i++ {
		total += overheadPerMessage + 2 // metadata '{}'
		switch r := i % (1 + meanAgentMessages); {
		case r == 0:
			total += userSize(rng)
		case rng.IntN(100) < toolCallPercent:
			total += toolSize(rng) + 180
		default:
			total += agentSize(rng)
		}
	}
	return float64(total) / n
}

// toolCallPercent is the share of agent messages that are ordinary (non-
// subagent) tool calls carrying tool metadata.
const toolCallPercent = 35

var toolKinds = []string{"read", "edit", "execute", "search", "fetch", "think"}

// newUUID draws a version 4 UUID from rng: random bits from the seed, so a
// seed writes the same ids.
func newUUID(rng *rand.Rand) string {
	id, _ := uuid.NewRandomFromReader(seeded{rng}) // seeded never fails
	return id.String()
}

// seeded reads rng's bits.
type seeded struct{ rng *rand.Rand }

func (s seeded) Read(p []byte) (int, error) {
	for i := 0; i < len(p); i += 8 {
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], s.rng.Uint64())
		copy(p[i:], b[:])
	}
	return len(p), nil
}

const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// toolCallID draws a Claude-style tool-call id ("toolu_01" + 22 characters).
func toolCallID(rng *rand.Rand) string {
	b := []byte("toolu_01")
	for i := 0; i < 22; i++ {
		b = append(b, base62[rng.IntN(len(base62))])
	}
	return string(b)
}

// subagentMeta is a subagent message's metadata as the host writes it.
// Absent fields are omitted, never written as "" or 0.
type subagentMeta struct {
	ToolCallID       string         `json:"tool_call_id"`
	ParentToolCallID string         `json:"parent_tool_call_id,omitempty"`
	Status           string         `json:"status"`
	Normalized       normalizedTask `json:"normalized"`
}

type normalizedTask struct {
	Kind         string       `json:"kind"`
	SubagentTask subagentTask `json:"subagent_task"`
}

type subagentTask struct {
	Status         string `json:"status,omitempty"`
	SubagentType   string `json:"subagent_type,omitempty"`
	Description    string `json:"description,omitempty"`
	AgentID        string `json:"agent_id,omitempty"`
	ChildSessionID string `json:"child_session_id,omitempty"`
	Model          string `json:"model,omitempty"`
	TotalTokens    int64  `json:"total_tokens,omitempty"`
	ToolUseCount   *int64 `json:"tool_use_count,omitempty"`
	DurationMs     int64  `json:"duration_ms,omitempty"`
	IsAsync        bool   `json:"is_async,omitempty"`
}

func (m subagentMeta) json() string {
	b, err := json.Marshal(m)
	if err != nil {
		panic(err) // plain strings and integers always marshal
	}
	return string(b)
}

var (
	subagentTypes = []string{"security-reviewer", "perf-reviewer", "docs-reviewer", "code-reviewer", "general-purpose", "test-writer", "explore"}
	models        = []string{"claude-opus-5[1m]", "claude-sonnet-5", "claude-haiku-4-5"}
)

// toolStatusFor is the ACP status of the launching tool call, by agent
// status: async_launched and completed calls finished; an OpenCode "started"
// call is still running; the status-less one never left pending.
func toolStatusFor(agentStatus string) string {
	switch agentStatus {
	case StatusAsyncLaunched, StatusCompleted:
		return "completed"
	case StatusStarted:
		return "in_progress"
	}
	return "pending"
}
