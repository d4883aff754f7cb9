package gen

import (
	"math"
	"math/rand/v2"
	"time"
)

// The reference store's observed window (spec: Sampled input shapes).
var (
	windowStart = time.Date(2026, 8, 3, 15, 32, 20, 0, time.UTC)
	windowEnd   = time.Date(2026, 8, 12, 13, 24, 58, 0, time.UTC)
)

// activationFraction places the activation instant of the legacy and amended
// states: invocations in sessions that start before it predate capture,
// later ones were captured live.
const activationFraction = 0.6

// invocation is one planned subagent invocation.
type invocation struct {
	status      string
	withModel   bool
	missingType bool
	nestedLast  bool // the last invocation of its turn names the first as parent
	tokens      int64
}

// turnPlan is one turn: fanOut subagent invocations (0 for an ordinary turn)
// and how many ordinary agent messages surround them.
type turnPlan struct {
	fanOut int
	first  int // index of its first invocation in plan.invocations
	nested bool
	agent  int
}

type sessionPlan struct {
	turns []turnPlan
}

// plan is everything decided before the first row is written. It holds a few
// integers per turn; message contents are produced while streaming.
type plan struct {
	pop         Population
	invocations []invocation
	sessions    []sessionPlan
	messages    int // planned total, for progress
}

// meanAgentMessages is the mean number of ordinary agent messages per turn
// (one user message opens every turn).
const meanAgentMessages = 7

func newPlan(rng *rand.Rand, pop Population, targetBytes int64, meanMessageBytes float64) *plan {
	p := &plan{pop: pop}

	p.planInvocations(rng, pop)

	// Subagent turns, shuffled, then dealt to the subagent sessions: every
	// such session gets at least one.
	var fan []int
	for _, f := range []int{1, 2, 3, 4, 5, 8} {
		for i := 0; i < pop.FanOut[f]; i++ {
			fan = append(fan, f)
		}
	}
	rng.Shuffle(len(fan), func(i, j int) { fan[i], fan[j] = fan[j], fan[i] })
	nested := 0
	sub := make([]sessionPlan, pop.Sessions)
	next := 0
	for i, f := range fan {
		s := i
		if i >= pop.Sessions {
			s = rng.IntN(pop.Sessions)
		}
		t := turnPlan{fanOut: f, first: next}
		if f > 1 && nested < pop.Nested {
			t.nested = true
			p.invocations[next+f-1].nestedLast = true
			nested++
		}
		next += f
		sub[s].turns = append(sub[s].turns, t)
	}

	// Ordinary history fills the rest of the target size.
	perTurn := (1 + meanAgentMessages) * meanMessageBytes
	subBytes := float64(len(fan))*perTurn + float64(len(p.invocations))*meanMessageBytes
	ordinary := int(math.Max(0, (float64(targetBytes)-subBytes)/perTurn))
	plain := int(math.Round(float64(ordinary) / 120)) // sessions without any fan-out
	sessions := append(sub, make([]sessionPlan, plain)...)
	for i := 0; i < ordinary; i++ {
		s := &sessions[rng.IntN(len(sessions))]
		s.turns = append(s.turns, turnPlan{})
	}
	for si := range sessions {
		s := &sessions[si]
		rng.Shuffle(len(s.turns), func(i, j int) { s.turns[i], s.turns[j] = s.turns[j], s.turns[i] })
		for ti := range s.turns {
			s.turns[ti].agent = 1 + rng.IntN(2*meanAgentMessages-1)
			p.messages += 1 + s.turns[ti].agent + s.turns[ti].fanOut
		}
	}
	// Sessions without turns (possible only at a tiny scale) still get one.
	for si := range sessions {
		if len(sessions[si].turns) == 0 {
			sessions[si].turns = []turnPlan{{agent: 1}}
			p.messages += 2
		}
	}
	rng.Shuffle(len(sessions), func(i, j int) { sessions[i], sessions[j] = sessions[j], sessions[i] })
	p.sessions = sessions
	return p
}

// planInvocations draws the invocations' attributes: statuses shuffled,
// then the rare shapes assigned.
func (p *plan) planInvocations(rng *rand.Rand, pop Population) {
	for _, st := range []string{StatusAsyncLaunched, StatusCompleted, StatusStarted, NoStatus} {
		for i := 0; i < pop.Status[st]; i++ {
			p.invocations = append(p.invocations, invocation{status: st})
		}
	}
	rng.Shuffle(len(p.invocations), func(i, j int) { p.invocations[i], p.invocations[j] = p.invocations[j], p.invocations[i] })
	withModel, maxGiven := 0, false
	for i := range p.invocations {
		inv := &p.invocations[i]
		if inv.status != StatusCompleted {
			continue
		}
		if withModel < pop.CompletedWithModel {
			inv.withModel = true
			withModel++
		}
		if !maxGiven {
			inv.tokens = pop.MaxTokens
			maxGiven = true
		} else {
			inv.tokens = 1000 + rng.Int64N(pop.MaxTokens-1000)
		}
	}
	for _, i := range rng.Perm(len(p.invocations))[:pop.MissingType] {
		p.invocations[i].missingType = true
	}
}

// sessionStart spreads sessions evenly over the reference window, in order.
func (p *plan) sessionStart(i int) time.Time {
	w := windowEnd.Sub(windowStart)
	return windowStart.Add(time.Duration(float64(w) * float64(i) / float64(len(p.sessions)))).Truncate(time.Microsecond)
}

// sessionBudget is the span one session's messages are spread over.
func (p *plan) sessionBudget() time.Duration {
	return time.Duration(0.9 * float64(windowEnd.Sub(windowStart)) / float64(len(p.sessions)))
}

func (p *plan) activation() time.Time {
	w := windowEnd.Sub(windowStart)
	return windowStart.Add(time.Duration(activationFraction * float64(w)))
}
