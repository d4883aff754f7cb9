package transcript

import (
	"context"
	"os"
	"sort"
	"strings"
)

// IndexEntry is one background execution of a parent session, located from
// durable state only: the transcript directory and, when given, the
// lifecycle table. Nothing in memory is consulted (acceptance test 5).
type IndexEntry struct {
	AgentID string `json:"agent_id"`
	// Transcript is the transcript as found on disk; nil when there is none.
	Transcript *Summary `json:"transcript"`
	// Lifecycle are the background_agent_log rows naming the execution (one
	// per workspace; normally one).
	Lifecycle []Entry `json:"lifecycle,omitempty"`
	// Problems are what a reader should not trust, in words.
	Problems []string `json:"problems,omitempty"`
}

// Index lists a parent session's background executions from the transcript
// directory and, when l is not nil, from background_agent_log (restricted to
// one workspace when workspace is not ""), and names what is wrong with each:
// an unreadable transcript, a recorded persistence failure, a row claiming a
// transcript that does not exist, a row with no transcript at all, a running
// transcript whose execution is no longer alive, a finished transcript whose
// row is not terminal.
func Index(ctx context.Context, s *Store, l *Lifecycle, workspace, session string) ([]IndexEntry, error) {
	sums, err := s.List(ctx, session)
	if err != nil {
		return nil, err
	}
	byAgent := map[string]*IndexEntry{}
	get := func(agent string) *IndexEntry {
		if e, ok := byAgent[agent]; ok {
			return e
		}
		e := &IndexEntry{AgentID: agent}
		byAgent[agent] = e
		return e
	}
	for i := range sums {
		get(sums[i].AgentID).Transcript = &sums[i]
	}
	if l != nil {
		rows, err := l.List(ctx, workspace, session)
		if err != nil {
			return nil, err
		}
		for _, r := range rows {
			e := get(r.AgentID)
			e.Lifecycle = append(e.Lifecycle, r)
		}
	}
	out := make([]IndexEntry, 0, len(byAgent))
	for _, e := range byAgent {
		e.Problems = diagnose(e, l != nil)
		out = append(out, *e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].AgentID < out[j].AgentID })
	return out, nil
}

func diagnose(e *IndexEntry, haveLifecycle bool) []string {
	var p []string
	t := e.Transcript
	if t != nil && t.Err != "" {
		p = append(p, "transcript unreadable: "+t.Err)
	}
	alive := false
	for _, r := range e.Lifecycle {
		alive = alive || r.Alive()
		switch {
		case strings.HasPrefix(r.TranscriptStatus, "error:"):
			p = append(p, "persistence failure recorded in "+LifecycleTable+": "+r.TranscriptStatus)
		case r.TranscriptStatus == "" && t == nil:
			p = append(p, LifecycleTable+" has a row for it (status "+r.Status+") but no transcript exists and none was recorded")
		case r.TranscriptStatus == "ok" && t == nil:
			p = append(p, LifecycleTable+" says transcript ok but none exists at "+r.TranscriptPath)
		case r.TranscriptStatus == "ok" && r.TranscriptPath != "":
			if _, err := os.Lstat(strings.TrimSuffix(r.TranscriptPath, finalSuffix) + logSuffix); err != nil {
				p = append(p, LifecycleTable+" points at "+r.TranscriptPath+", which does not exist")
			}
		}
	}
	if t != nil && t.Status.Terminal() && alive {
		p = append(p, "transcript is "+string(t.Status)+" but "+LifecycleTable+" still says running; run recover")
	}
	if haveLifecycle && t != nil && t.Status == Running && !alive {
		p = append(p, "transcript still running but its execution is not alive per "+LifecycleTable+"; run recover")
	}
	return p
}
