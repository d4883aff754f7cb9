package reconcile

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// phaseSession applies a plan phase by phase, each phase in a transaction of
// its own or in none (PostgreSQL, postgres_apply.go).
type phaseSession interface {
	session
	runPhases(ctx context.Context, group []Phase, h phaseHooks) ([]bool, error)
}

// stepOwnTx runs a step whose phases open their own transactions.
func (r *run) stepOwnTx(ctx context.Context, name string, fn func(context.Context) Step) {
	start := time.Now()
	stop := r.watch(name)
	s := fn(ctx)
	stop(string(s.Status))
	s.Name = name
	s.Duration = time.Since(start)
	r.record(s)
}

// shapePhases plans every owned table from the live catalog and applies the
// shape step's phases.
func (r *run) shapePhases(ctx context.Context, ps phaseSession) Step {
	q := r.sess.querier()
	drv, err := atlasDriver(r.o.dialect, q)
	if err != nil {
		return failed(err)
	}
	plan, err := planShape(ctx, drv, r.o.dialect, q, r.decl, r.schema, r.o)
	if err != nil {
		return failed(err)
	}
	r.plan = plan
	r.rep.Drift = plan.Drift()
	r.reportDrift()
	r.refused = plan.Refused()
	s := r.applyPhases(ctx, ps, StepShape)
	if s.Status == Unchanged {
		r.shapeClean = len(r.refused) == 0 && len(plan.stepPhases(StepWiden)) == 0
		if len(r.rep.Drift) > 0 {
			s.Detail += fmt.Sprintf("; %d undeclared kept", len(r.rep.Drift))
		}
	}
	return s
}

// applyPhases runs one step's phases in order, consecutive transactional
// phases in one transaction. A failed phase fails the step; the phases
// committed before it stay (each leaves a state the next boot resumes from).
func (r *run) applyPhases(ctx context.Context, ps phaseSession, step string) Step {
	phases := r.plan.stepPhases(step)
	var groups [][]Phase
	for i, ph := range phases {
		if i > 0 && ph.Transactional && phases[i-1].Transactional {
			groups[len(groups)-1] = append(groups[len(groups)-1], ph)
			continue
		}
		groups = append(groups, []Phase{ph})
	}
	lastTx := -1
	for i, g := range groups {
		if g[0].Transactional {
			lastTx = i
		}
	}
	var ran, said, why []string
	n := 0
	for i, g := range groups {
		for j, ph := range g {
			if (i == 0 && j == 0) || prevTable(groups, i, j) != ph.Table {
				r.progress(step, "applying "+ph.Table)
			}
			r.progress(step, "phase "+ph.ID())
		}
		h := phaseHooks{fail: r.o.fail, progress: func(msg string) { r.progress(step, msg) }, executed: r.o.executed}
		if step == StepShape && i == lastTx {
			h.beforeCommit = func() error { return r.o.fail(FailpointShapeApplied) }
		}
		did, err := ps.runPhases(ctx, g, h)
		for j, ph := range g {
			if !did[j] {
				continue
			}
			ran = append(ran, ph.ID())
			said = append(said, ph.said())
			n += len(ph.SQL)
			if ph.Detail != "" && !contains(why, ph.Table+": "+ph.Detail) {
				why = append(why, ph.Table+": "+ph.Detail)
			}
		}
		if err != nil {
			if len(ran) > 0 {
				err = fmt.Errorf("%w (committed before it: %s)", err, strings.Join(ran, ", "))
			}
			return failed(err)
		}
	}
	if step == StepShape && lastTx < 0 {
		if err := r.o.fail(FailpointShapeApplied); err != nil {
			return failed(err)
		}
	}
	if len(ran) == 0 {
		return Step{Status: Unchanged, Detail: "declared shape holds"}
	}
	return Step{Status: Applied, Statements: n, Phases: ran, Detail: strings.Join(said, ", ") + " (" + strings.Join(why, "; ") + ")"}
}

// said is how a step's detail names the phase once it ran.
func (p Phase) said() string {
	switch p.Name {
	case PhaseCreate:
		return "created " + p.Table
	case PhaseAlter:
		return "altered " + p.Table
	case PhaseWiden:
		return "widened column types of " + p.Table
	}
	return p.ID()
}

func prevTable(groups [][]Phase, i, j int) string {
	if j > 0 {
		return groups[i][j-1].Table
	}
	g := groups[i-1]
	return g[len(g)-1].Table
}
