package gen

import (
	"math"
	"sort"
)

// ReferenceMB is the size of the measured reference store (host-context.md,
// "Reference-store shape"); every count below is per ReferenceMB.
const ReferenceMB = 328

// Agent-reported subagent statuses of the reference population. NoStatus is
// the one invocation whose payload carried no status at all.
const (
	StatusAsyncLaunched = "async_launched"
	StatusCompleted     = "completed"
	StatusStarted       = "started"
	NoStatus            = ""
)

// The reference population, measured on the 328 MB store.
var (
	refFanOut = map[int]int{1: 65, 2: 12, 3: 42, 4: 5, 5: 2, 8: 1}
	refStatus = map[string]int{StatusAsyncLaunched: 190, StatusCompleted: 57, StatusStarted: 5, NoStatus: 1}
)

const (
	refSessions           = 38
	refCompletedWithModel = 49
	refNested             = 1
	refMissingType        = 3
	refMaxTokens          = 275717
)

// Population is the subagent population one generation writes: the
// reference distribution multiplied by a factor and rounded. Every subagent
// invocation is exactly one message whose metadata carries
// normalized.kind = "subagent_task".
type Population struct {
	// Sessions is the number of sessions holding at least one invocation.
	Sessions int `json:"sessions"`
	// FanOut maps invocations-per-turn to the number of turns with that fan-out.
	FanOut map[int]int `json:"fan_out"`
	// Status maps the agent-reported status ("" for none) to its count.
	Status map[string]int `json:"status"`
	// CompletedWithModel is how many of the completed invocations name a model.
	CompletedWithModel int `json:"completed_with_model"`
	// Nested is how many invocations carry a parent_tool_call_id.
	Nested int `json:"nested"`
	// MissingType is how many invocations carry no subagent_type.
	MissingType int `json:"missing_type"`
	// MaxTokens is the largest total_tokens reported (one completed invocation).
	MaxTokens int64 `json:"max_tokens"`
}

// Invocations is the total number of subagent invocations.
func (p Population) Invocations() int {
	n := 0
	for k, v := range p.FanOut {
		n += k * v
	}
	return n
}

// Turns is the number of turns that fanned out at least once.
func (p Population) Turns() int {
	n := 0
	for _, v := range p.FanOut {
		n += v
	}
	return n
}

// Expected is the population at factor k (1 = the reference store; 4 = four
// times its size). Fan-out buckets scale and round independently; the status
// mix is apportioned over the resulting total by largest remainder, so the
// counts always add up. The rare shapes — the nested invocation, the missing
// subagent_type, the status-less and the OpenCode ("started") invocations —
// are kept at one or more whenever there is anything to carry them, so a
// small store still exercises every shape.
func Expected(k float64) Population {
	p := Population{FanOut: map[int]int{}, Status: map[string]int{}}
	if k <= 0 {
		return p
	}
	for f, n := range refFanOut {
		if c := int(math.Round(float64(n) * k)); c > 0 {
			p.FanOut[f] = c
		}
	}
	if len(p.FanOut) == 0 {
		p.FanOut[1] = 1
	}
	total := p.Invocations()
	p.Status = apportion(refStatus, total, []string{StatusStarted, NoStatus})
	p.Sessions = clamp(int(math.Round(refSessions*k)), 1, p.Turns())
	p.CompletedWithModel = clamp(int(math.Round(float64(p.Status[StatusCompleted])*refCompletedWithModel/57)), 0, p.Status[StatusCompleted])
	multi := 0
	for f, n := range p.FanOut {
		if f > 1 {
			multi += n
		}
	}
	p.Nested = clamp(int(math.Round(refNested*k)), min(1, multi), multi)
	p.MissingType = clamp(int(math.Round(refMissingType*k)), 1, total)
	if p.Status[StatusCompleted] > 0 {
		p.MaxTokens = refMaxTokens
	}
	return p
}

// apportion splits total over the reference weights by largest remainder;
// each key in atLeastOne receives one if total allows.
func apportion(ref map[string]int, total int, atLeastOne []string) map[string]int {
	keys := make([]string, 0, len(ref))
	sum := 0
	for k, v := range ref {
		keys = append(keys, k)
		sum += v
	}
	sort.Strings(keys)
	out := map[string]int{}
	reserved := 0
	for _, k := range atLeastOne {
		if reserved < total {
			out[k] = 1
			reserved++
		}
	}
	type rem struct {
		k string
		r float64
	}
	var rems []rem
	given := 0
	for _, k := range keys {
		exact := float64(ref[k]) * float64(total) / float64(sum)
		n := int(exact)
		if out[k] > n {
			rems = append(rems, rem{k, -1})
			given += out[k]
			continue
		}
		out[k] = n
		given += n
		rems = append(rems, rem{k, exact - float64(n)})
	}
	sort.SliceStable(rems, func(i, j int) bool { return rems[i].r > rems[j].r })
	for i := 0; given < total; i = (i + 1) % len(rems) {
		out[rems[i].k]++
		given++
	}
	for i := len(rems) - 1; given > total && i >= 0; i-- {
		if k := rems[i].k; out[k] > 0 && !contains(atLeastOne, k) {
			out[k]--
			given--
		}
	}
	for k, v := range out {
		if v == 0 {
			delete(out, k)
		}
	}
	return out
}

func contains(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

func clamp(v, lo, hi int) int {
	if v < lo {
		v = lo
	}
	if v > hi {
		v = hi
	}
	return v
}
