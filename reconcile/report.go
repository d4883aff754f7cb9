package reconcile

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/keys"
)

// Status is a step's outcome.
type Status string

const (
	Applied   Status = "applied"
	Unchanged Status = "unchanged"
	Skipped   Status = "skipped"
	Failed    Status = "failed"
	// InProgress is the widen step stopped by the online budget
	// (WithOnlineBudget) with its upgrade left resumable: the next boot, or
	// another Reconcile call, continues it from the catalog.
	InProgress Status = "in_progress"
)

// Step is one step's outcome.
type Step struct {
	Name       string `json:"name"`
	Status     Status `json:"status"`
	Statements int    `json:"statements"`
	Detail     string `json:"detail,omitempty"`
	// Rows is the number of rows a step wrote, where that means something.
	Rows *int64 `json:"rows,omitempty"`
	// Phases lists the IDs (Phase.ID) of the plan phases the step ran, in
	// order.
	Phases   []string      `json:"phases,omitempty"`
	Duration time.Duration `json:"-"`
	Err      error         `json:"-"`
}

// Report is what one Reconcile did.
type Report struct {
	Dialect dialect.Dialect `json:"dialect"`
	// Lock names the cross-replica lock the reconcile uses on this dialect:
	// "advisory_xact" (a transaction-scoped advisory lock) on PostgreSQL,
	// "sqlite_write" on SQLite (the database's write lock, taken by BEGIN
	// IMMEDIATE; the lock class every SQLite phase names in a plan).
	Lock     string   `json:"lock"`
	Steps    []Step   `json:"steps"`
	EndState EndState `json:"end_state"`
	// EndStateObserved is false when no step got as far as observing the
	// end state (a lock not acquired, an unloadable declaration): EndState
	// then says nothing, rather than "every clause false".
	EndStateObserved bool     `json:"end_state_observed"`
	Keys             keys.Set `json:"keys"`
	// KeysRead is false when the keys were never read: a nil key in Keys
	// then means "not read", not "absent".
	KeysRead bool `json:"keys_read"`
	// Certified reports that the boot ended with the live catalog certified
	// (fingerprint.go): it took the fast path, or its full check found
	// nothing to change and recorded the certificate.
	Certified bool `json:"certified"`
	// Drift lists the undeclared indexes, foreign keys and checks on the
	// owned tables: kept (and logged at WARN) unless the reconcile ran
	// WithPrune, which drops them.
	Drift []Drift `json:"drift,omitempty"`
}

// Step returns the named step, or nil.
func (r *Report) Step(name string) *Step {
	for i := range r.Steps {
		if r.Steps[i].Name == name {
			return &r.Steps[i]
		}
	}
	return nil
}

// Err is nil when no step failed; else the failed step's *StepError, or, when
// several failed, their errors.Join in step order. Every StepError keeps the
// cause's chain and matches ErrStepFailed.
func (r *Report) Err() error {
	var errs []error
	for _, s := range r.Steps {
		if s.Status != Failed {
			continue
		}
		cause := s.Err
		if cause == nil {
			cause = errors.New(s.Detail)
		}
		errs = append(errs, &StepError{Step: s.Name, Err: cause})
	}
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	return errors.Join(errs...)
}

func (r *run) record(s Step) {
	if s.Status == Failed {
		r.warn(s.Name, s.Err)
	} else {
		r.logStep(slog.LevelInfo, s)
	}
	r.keep(s)
}

// logStep logs s at level: each step at INFO, a certified boot's at DEBUG
// (fastPath logs the boot in one INFO line).
func (r *run) logStep(level slog.Level, s Step) {
	r.o.logger.LogAttrs(context.Background(), level, "reconcile step", slog.String("step", s.Name), slog.String("status", string(s.Status)),
		slog.Int("statements", s.Statements), slog.String("detail", s.Detail), slog.Duration("duration", s.Duration))
}

// stepsMax is how many steps a report holds at most: one per row of the
// step table (bootSteps).
const stepsMax = 7

// keep adds s to the report, its span and its count.
func (r *run) keep(s Step) {
	r.traceStep(s)
	r.meters.countStep(s)
	if r.rep.Steps == nil {
		r.rep.Steps = make([]Step, 0, stepsMax)
	}
	r.rep.Steps = append(r.rep.Steps, s)
}

func (r *run) warn(step string, err error) {
	r.o.logger.Warn("reconcile step failed; the database is unchanged by it and the step is retried next boot",
		"step", step, "dialect", string(r.o.dialect), "error", err)
}

func (r *run) skipRest(from, why string) {
	on := false
	for _, st := range bootSteps() {
		if st.name == from {
			on = true
		}
		if on && st.always && r.rep.Step(st.name) == nil {
			r.keep(Step{Name: st.name, Status: Skipped, Detail: why})
		}
	}
}

func failed(err error) Step { return Step{Status: Failed, Detail: err.Error(), Err: err} }

// reportDrift logs, once per boot, every undeclared index, foreign key and
// check on the owned tables, naming each.
func (r *run) reportDrift() {
	if len(r.rep.Drift) == 0 {
		return
	}
	names := make([]string, len(r.rep.Drift))
	for i, d := range r.rep.Drift {
		names[i] = d.String()
	}
	if r.o.prune {
		r.o.logger.Info("reconcile: dropping what schema.hcl does not declare (prune)", "drift", names)
		return
	}
	r.o.logger.Warn("reconcile: owned tables carry indexes, foreign keys or checks schema.hcl does not declare; kept (reconcile --prune drops them)", "drift", names)
}
