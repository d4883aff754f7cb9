package transcript

import (
	"context"
	"errors"
	"fmt"
)

// Recovered is one transcript Recover finished.
type Recovered struct {
	SessionID string `json:"session_id"`
	AgentID   string `json:"agent_id"`
	Path      string `json:"path"`
	// Lifecycle is what background_agent_log said: a terminal status, or
	// "missing" when no row names the execution.
	Lifecycle string `json:"lifecycle"`
	Reason    string `json:"reason"`
}

// Problem is a transcript Recover could not read or finish.
type Problem struct {
	SessionID string `json:"session_id"`
	AgentID   string `json:"agent_id"`
	Path      string `json:"path"`
	Error     string `json:"error"`
}

// RecoverReport is what one Recover found and did.
type RecoverReport struct {
	Finished []Recovered `json:"finished"`
	// RowsEnded are finished transcripts whose lifecycle row was still not
	// terminal (the finisher died, or its lifecycle write failed, after the
	// document was published); the row was ended as the transcript ended.
	RowsEnded []Recovered `json:"rows_ended"`
	// Alive are running transcripts whose execution is alive; left alone.
	Alive    []Summary `json:"alive"`
	Problems []Problem `json:"problems"`
}

// Recover finishes every running transcript below root whose execution is no
// longer alive, as failed with an "interrupted: …" reason.
//
// Alive is decided by background_agent_log alone, never by memory or by the
// transcript: an execution is alive when a row with its (session, agent) —
// and workspace, when workspace is not "" — has a non-terminal status (see
// Entry.Alive). It is not alive when every such row is terminal or there is
// no row at all. A row left 'running' by a crashed host is therefore alive
// until the host's own lifecycle recovery ends it; Recover never guesses.
//
// Each row of a recovered execution gets transcript_status
// 'error: recover: interrupted: …': its transcript may miss the events after
// its last durable append.
func Recover(ctx context.Context, root string, l *Lifecycle, workspace string) (*RecoverReport, error) {
	s, err := NewStore(root)
	if err != nil {
		return nil, err
	}
	if err := l.Check(ctx); err != nil {
		return nil, err
	}
	sessions, err := s.Sessions()
	if err != nil {
		return nil, err
	}
	rep := &RecoverReport{Finished: []Recovered{}, RowsEnded: []Recovered{}, Alive: []Summary{}, Problems: []Problem{}}
	for _, session := range sessions {
		sums, err := s.List(ctx, session)
		if err != nil {
			return nil, err
		}
		for _, sum := range sums {
			if sum.Err != "" {
				rep.Problems = append(rep.Problems, Problem{session, sum.AgentID, sum.Path, sum.Err})
				continue
			}
			if sum.Status != Running {
				ended, err := endRowsAsTranscript(ctx, s, l, workspace, session, sum.AgentID)
				if err != nil {
					return nil, err
				}
				rep.RowsEnded = append(rep.RowsEnded, ended...)
				continue
			}
			if err := recoverRunning(ctx, s, l, workspace, session, sum, rep); err != nil {
				return nil, err
			}
		}
	}
	return rep, nil
}

// recoverRunning finishes the running transcript sum of session as failed
// when no lifecycle row says its execution is alive, and records that on
// each of its rows; rep gets the outcome. The error is one that stops
// Recover (the lifecycle table could not be read or written); a transcript
// that could not be finished is a Problem in rep.
func recoverRunning(ctx context.Context, s *Store, l *Lifecycle, workspace, session string, sum Summary, rep *RecoverReport) error {
	rows, err := l.Find(ctx, workspace, session, sum.AgentID)
	if err != nil {
		return err
	}
	life, alive := "missing", false
	for _, r := range rows {
		life = r.Status
		alive = alive || r.Alive()
	}
	if alive {
		rep.Alive = append(rep.Alive, sum)
		return nil
	}
	reason := fmt.Sprintf("interrupted: transcript was still running but %s has %s; events after its last durable append may be missing",
		LifecycleTable, describe(rows))
	err = s.Finish(ctx, session, sum.AgentID, End{Status: Failed, Error: reason})
	if errors.Is(err, ErrFinished) {
		return nil // finished by its writer meanwhile
	}
	if err != nil {
		rep.Problems = append(rep.Problems, Problem{session, sum.AgentID, sum.Path, err.Error()})
		return nil
	}
	p, _ := s.PathsFor(session, sum.AgentID)
	for _, r := range rows {
		id := Identity{WorkspacePath: r.WorkspacePath, SessionID: r.SessionID, AgentID: r.AgentID}
		if err := l.RecordTranscript(ctx, id, p.Transcript, statusText("recover", errors.New(reason))); err != nil {
			return err
		}
	}
	rep.Finished = append(rep.Finished, Recovered{session, sum.AgentID, p.Transcript, life, reason})
	return nil
}

// endRowsAsTranscript ends every non-terminal lifecycle row of a finished
// transcript as the transcript ended.
func endRowsAsTranscript(ctx context.Context, s *Store, l *Lifecycle, workspace, session, agent string) ([]Recovered, error) {
	rows, err := l.Find(ctx, workspace, session, agent)
	if err != nil {
		return nil, err
	}
	var t *Transcript
	var out []Recovered
	for _, r := range rows {
		if !r.Alive() {
			continue
		}
		if t == nil {
			rd, err := s.Open(ctx, session, agent)
			if err != nil {
				return nil, err
			}
			t = rd.Summary()
			rd.Close()
		}
		id := Identity{WorkspacePath: r.WorkspacePath, SessionID: r.SessionID, AgentID: r.AgentID}
		changed, err := endRow(ctx, l, id, t)
		if err != nil {
			return nil, err
		}
		if changed {
			out = append(out, Recovered{session, agent, t.Path, r.Status,
				fmt.Sprintf("%s row was still %s; ended as the transcript ended (%s)", LifecycleTable, r.Status, t.Status)})
		}
	}
	return out, nil
}

func describe(rows []Entry) string {
	if len(rows) == 0 {
		return "no row for it"
	}
	s := ""
	for i, r := range rows {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("status=%s", r.Status)
		if r.CompletedAt != nil {
			s += " completed_at=" + r.CompletedAt.Format("2006-01-02T15:04:05.999999Z07:00")
		}
		if r.Error != "" {
			s += fmt.Sprintf(" error=%q", r.Error)
		}
	}
	return s
}
