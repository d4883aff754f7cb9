package capture

import (
	"encoding/json"
	"sync"
)

// Counters are the writer's health counters (AC-26). The unit is one frame
// that reached the writer, never a row: a frame that merges onto an existing
// row counts exactly as one that creates it.
//
// Attempted == SkippedNoIdentity + Persisted + Failed holds exactly in every
// snapshot, because a frame's attempt and its outcome are counted together.
// AnomalousValue (frames that reached the write carrying a negative metric,
// AC-9), UnstorableText (frames that reached the write with a descriptive
// text field stored NULL because it held a NUL, bytes that are not UTF-8 or
// a lone surrogate), UnknownExecution (rows written with the 'unknown'
// sentinel, AC-31) and Retried (frames that needed more than one attempt,
// whatever their outcome) are qualifiers that overlap the outcomes.
type Counters struct {
	Attempted         int64 `json:"attempted"`
	Persisted         int64 `json:"persisted"`
	SkippedNoIdentity int64 `json:"skipped_no_identity"`
	Failed            int64 `json:"failed"`
	AnomalousValue    int64 `json:"anomalous_value"`
	UnstorableText    int64 `json:"unstorable_text"`
	UnknownExecution  int64 `json:"unknown_execution"`
	Retried           int64 `json:"retried"`
}

// outcome is what one Record did, applied to the counters in one step.
type outcome struct {
	skipped, persisted, failed, anomalous, unstorable, unknown, retried bool
}

func (c *Counters) add(o outcome) {
	c.Attempted++
	c.SkippedNoIdentity += one(o.skipped)
	c.Persisted += one(o.persisted)
	c.Failed += one(o.failed)
	c.AnomalousValue += one(o.anomalous)
	c.UnstorableText += one(o.unstorable)
	c.UnknownExecution += one(o.unknown)
	c.Retried += one(o.retried)
}

// one is what a flag of an outcome adds to its counter: 1 when set.
func one(flag bool) int64 {
	if flag {
		return 1
	}
	return 0
}

// counterSet is a mutex-guarded Counters, so a snapshot never shows a frame's
// attempt without its outcome.
type counterSet struct {
	mu sync.Mutex
	c  Counters
}

func (s *counterSet) add(o outcome) {
	s.mu.Lock()
	s.c.add(o)
	s.mu.Unlock()
}

func (s *counterSet) snapshot() Counters {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.c
}

// ExpvarName is the name under which a host publishes the process-wide
// counters of every Writer with expvar, as one JSON object with the counter
// names as keys (the routing_* / subproc_* convention):
//
//	expvar.Publish(capture.ExpvarName, capture.CountersVar{})
//
// Nothing is published on import: importing expvar registers /debug/vars
// (command line, memstats) on http.DefaultServeMux, which is the host's to
// decide. This package does not import expvar at all.
const ExpvarName = "subagent_context_writer"

// global sums every Writer in the process.
var global = &counterSet{}

// CountersVar renders a consistent snapshot of the process-wide counters as
// JSON; it satisfies expvar.Var.
type CountersVar struct{}

func (CountersVar) String() string {
	b, _ := json.Marshal(global.snapshot())
	return string(b)
}

// GlobalCounters is a snapshot of the process-wide counters (what CountersVar
// renders), for a host that wires them into its own metrics.
func GlobalCounters() Counters { return global.snapshot() }
