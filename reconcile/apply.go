package reconcile

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/schemastate/schemastate/internal/hooks"
	"github.com/schemastate/schemastate/internal/ops"
	"github.com/schemastate/schemastate/reconcile/internal/core"
)

// The applier: one for both dialects.
//
// A step's phases run in order, consecutive transactional phases grouped in
// one transaction scope of the session (SQLite: a savepoint of the
// reconcile's one transaction; PostgreSQL: its own transaction under the
// lock discipline, retried whole when it cannot get its lock), a
// non-transactional phase alone (PostgreSQL's CONCURRENTLY and batched copy,
// reconcile/internal/postgres/pgsession/apply.go). Each phase re-checks the live catalog first (DoneWhen)
// and its blockers (BlockedBy), runs its guards around its SQL (Guards), and
// is reported to the exec hook, the failpoints and the progress callback from
// here alone. A failed phase fails the step; on PostgreSQL the groups
// committed before it stay (each leaves a state the next boot resumes from).

// stepOwnTx runs a step whose phases open their own transaction scopes.
func (r *run) stepOwnTx(ctx context.Context, name string, fn func(context.Context) Step) {
	start := time.Now()
	ctx = r.beginStep(ctx, name)
	stop := r.watch(name)
	s := fn(ctx)
	stop(string(s.Status))
	s.Name = name
	s.Duration = time.Since(start)
	r.record(s)
}

// groupPhases groups consecutive transactional phases, which share one
// transaction scope; lastTx is the index of the last such group (-1 when
// none).
func groupPhases(phases []ops.Phase) (groups [][]ops.Phase, lastTx int) {
	for i, ph := range phases {
		if i > 0 && ph.Kind == ops.KindStatements && phases[i-1].Kind == ops.KindStatements {
			groups[len(groups)-1] = append(groups[len(groups)-1], ph)
			continue
		}
		groups = append(groups, []ops.Phase{ph})
	}
	lastTx = -1
	for i, g := range groups {
		if g[0].Kind == ops.KindStatements {
			lastTx = i
		}
	}
	return groups, lastTx
}

// applied is what a step's phases did: their ids, how each said it, the
// statements run and why.
type applied struct {
	ran, said, why []string
	statements     int
}

func (a *applied) add(ph ops.Phase) {
	a.ran = append(a.ran, ph.ID())
	a.said = append(a.said, core.Said(ph))
	a.statements += len(ph.SQL)
	if ph.Detail != "" && !contains(a.why, ph.Table+": "+ph.Detail) {
		a.why = append(a.why, ph.Table+": "+ph.Detail)
	}
}

// step is the step's result once every phase ran.
func (a *applied) step() Step {
	if len(a.ran) == 0 {
		return Step{Status: Unchanged, Detail: "declared shape holds"}
	}
	detail := strings.Join(a.said, ", ")
	if len(a.why) > 0 {
		detail += " (" + strings.Join(a.why, "; ") + ")"
	}
	return Step{Status: Applied, Statements: a.statements, Phases: a.ran, Detail: detail}
}

// committedBefore adds to err the phases committed before it.
func (a *applied) committedBefore(err error) error {
	if len(a.ran) == 0 {
		return err
	}
	return fmt.Errorf("%w (committed before it: %s)", err, strings.Join(a.ran, ", "))
}

// preflighter is a session that checks a step's phases against the
// server's settings before the first of them runs: PostgreSQL's
// statement_timeout (reconcile/internal/postgres/pgsession/timeout.go). SQLite has no such setting.
type preflighter interface {
	Preflight(ctx context.Context, phases []ops.Phase) error
}

// applyPhases runs one step's phases.
func (r *run) applyPhases(ctx context.Context, sess core.Session, step string, phases []ops.Phase) Step {
	// Before the first phase: a step refused here has run nothing.
	if pf, ok := sess.(preflighter); ok {
		if err := pf.Preflight(ctx, phases); err != nil {
			return failed(err)
		}
	}
	groups, lastTx := groupPhases(phases)
	h := core.PhaseHooks{Fail: r.o.fail, Progress: func(msg string) { r.progress(step, msg) }, Executed: r.o.executed}
	if d, ok := sess.(core.ConnDiscarder); ok {
		h.Discard = d.Discard
	}
	var a applied
	for i, g := range groups {
		if step == StepWiden {
			if err := r.o.overBudget(); err != nil {
				return inProgress(err, a.ran)
			}
		}
		for j, ph := range g {
			if (i == 0 && j == 0) || prevTable(groups, i, j) != ph.Table {
				r.progress(step, "applying "+ph.Table)
			}
			r.progress(step, "phase "+ph.ID())
		}
		if err := sess.Holding(ctx); err != nil {
			if len(a.ran) > 0 {
				err = fmt.Errorf("before %s: %w (committed before it: %s)", g[0].ID(), err, strings.Join(a.ran, ", "))
			}
			return failed(err)
		}
		did, err := r.runPhaseGroup(ctx, sess, step, g, h, step == StepShape && i == lastTx)
		for j, ph := range g {
			if did[j] {
				a.add(ph)
			}
		}
		if err != nil {
			if errors.Is(err, ops.ErrBudgetSpent) {
				return inProgress(err, a.ran)
			}
			return failed(a.committedBefore(err))
		}
	}
	if step == StepShape && lastTx < 0 {
		if err := r.o.fail(hooks.FailpointShapeApplied); err != nil {
			return failed(err)
		}
	}
	return a.step()
}

// runPhaseGroup runs one group of phases, each in its span: a transaction
// scope of statements (lastShapeTx: the shape step's last, after which
// FailpointShapeApplied fires before the commit), or one phase alone; then
// each finished phase's FailpointAfterPhase. did tells which phases ran.
func (r *run) runPhaseGroup(ctx context.Context, sess core.Session, step string, g []ops.Phase, h core.PhaseHooks, lastShapeTx bool) (did []bool, err error) {
	ends := make([]func(bool, error), len(g))
	for j, ph := range g {
		ends[j] = r.tracePhase(ctx, ph)
	}
	if g[0].Kind == ops.KindStatements {
		var beforeCommit func() error
		if lastShapeTx {
			beforeCommit = func() error { return r.o.fail(hooks.FailpointShapeApplied) }
		}
		did, err = r.runGroup(ctx, sess, step, g, h, beforeCommit)
	} else {
		did = make([]bool, 1)
		did[0], err = r.runAlone(ctx, sess, g[0], h)
	}
	for j := range g {
		ends[j](did[j], err) // runGroup and runAlone tell every phase of g
	}
	if err != nil {
		return did, err
	}
	// After the phase's transaction committed, or the phase finished.
	for j, ph := range g {
		if did[j] {
			if err := r.o.fail(hooks.FailpointAfterPhase(ph.ID())); err != nil {
				return did, err
			}
		}
	}
	return did, nil
}

// inProgress is the widen step stopped by the online budget: not a failure,
// the upgrade is resumable from the catalog.
func inProgress(err error, ran []string) Step {
	detail := err.Error() + "; the upgrade is in progress, resumable: the next boot or another Reconcile call continues it"
	if len(ran) > 0 {
		detail += " (done this call: " + strings.Join(ran, ", ") + ")"
	}
	return Step{Status: InProgress, Phases: ran, Detail: detail}
}

// runGroup runs consecutive transactional phases in one transaction scope
// of the session, so the single-transaction path stays all-or-nothing across
// tables. It reports, per phase, whether it ran. The exec hook is told the
// statements once the scope succeeded: an attempt retried for its lock was
// rolled back, and is reported once, from the attempt that committed.
func (r *run) runGroup(ctx context.Context, sess core.Session, step string, group []ops.Phase, h core.PhaseHooks, beforeCommit func() error) ([]bool, error) {
	ran := make([]bool, len(group))
	var executed []string
	err := sess.Transact(ctx, step, group[0].Table, func(q core.Querier) error {
		clear(ran)
		executed = executed[:0]
		for i, ph := range group {
			todo, err := r.todo(ctx, q, ph)
			if err != nil {
				return err
			}
			if !todo {
				continue
			}
			if err := r.runPhase(ctx, q, ph, h, &executed); err != nil {
				return err
			}
			if err := h.Fail(hooks.FailpointPhaseHeld(ph.ID())); err != nil {
				return err
			}
			ran[i] = true
		}
		if beforeCommit != nil {
			return beforeCommit()
		}
		return nil
	})
	if err != nil {
		clear(ran) // rolled back
		return ran, err
	}
	for _, stmt := range executed {
		h.Executed(stmt)
	}
	return ran, nil
}

// runAlone runs a non-transactional phase, once the live catalog says it is
// still to do.
func (r *run) runAlone(ctx context.Context, sess core.Session, ph ops.Phase, h core.PhaseHooks) (bool, error) {
	todo, err := r.todo(ctx, sess.Querier(), ph)
	if err != nil || !todo {
		return false, err
	}
	if err := sess.Alone(ctx, ph, h); err != nil {
		return false, fmt.Errorf("%s: %w", ph.ID(), err)
	}
	return true, nil
}

// todo checks a phase against the live catalog: false when it is already
// done, an error naming what blocks it.
func (r *run) todo(ctx context.Context, q core.Querier, ph ops.Phase) (bool, error) {
	if ph.DoneWhen != "" {
		var done bool
		if err := q.QueryRowContext(ctx, ph.DoneWhen).Scan(&done); err != nil {
			return false, fmt.Errorf("%s: check whether done: %w", ph.ID(), err)
		}
		if done {
			return false, nil
		}
	}
	if ph.BlockedBy != "" {
		blockers, err := core.QueryStrings(ctx, q, ph.BlockedBy)
		if err != nil {
			return false, fmt.Errorf("%s: check blockers: %w", ph.ID(), err)
		}
		if len(blockers) > 0 {
			return false, fmt.Errorf("%s: %w by %s (retried next boot)", ph.ID(), ops.ErrPhaseBlocked, strings.Join(blockers, "; "))
		}
	}
	return true, nil
}

// runPhase runs one transactional phase's SQL inside its guards.
func (r *run) runPhase(ctx context.Context, q core.Querier, ph ops.Phase, h core.PhaseHooks, executed *[]string) (err error) {
	var violations, rows []int64
	for _, g := range ph.Guards {
		switch g.Kind {
		case ops.GuardNoNulls:
			if err := refuseNulls(ctx, q, ph, g); err != nil {
				return err
			}
		case ops.GuardForeignKeys:
			n, err := countRows(ctx, q, g.Queries)
			if err != nil {
				return fmt.Errorf("%s: %w", ph.ID(), err)
			}
			violations = append(violations, n)
		case ops.GuardRowsCopied:
			var n int64
			if err := q.QueryRowContext(ctx, g.Count).Scan(&n); err != nil {
				return fmt.Errorf("%s: %w", ph.ID(), err)
			}
			rows = append(rows, n)
			h.Progress(fmt.Sprintf("rebuilding %s: copying %d rows", ph.Table, n))
		case ops.GuardSetting:
			restore, serr := r.setting(ctx, q, ph, g, h)
			if serr != nil {
				return serr
			}
			defer func() { err = errors.Join(err, restore()) }() // runPhase's own err
		default:
			return fmt.Errorf("%s: unknown guard %q", ph.ID(), g.Kind)
		}
	}
	for _, stmt := range ph.SQL {
		res, err := q.ExecContext(ctx, stmt)
		if err != nil {
			return fmt.Errorf("%s: %s: %w", ph.ID(), core.FirstLine(stmt), r.drv.Explain(err))
		}
		*executed = append(*executed, stmt)
		if err := checkCopied(ph, h, stmt, res, rows); err != nil {
			return err
		}
	}
	return checkViolations(ctx, q, ph, violations)
}

// checkCopied holds a copy statement that just ran (res) to the rows its
// GuardRowsCopied counted before it (rows, one per such guard, in order).
func checkCopied(ph ops.Phase, h core.PhaseHooks, stmt string, res sql.Result, rows []int64) error {
	k := 0
	for _, g := range ph.Guards {
		if g.Kind != ops.GuardRowsCopied {
			continue
		}
		if want := rows[k]; g.Copy == stmt {
			copied, err := res.RowsAffected()
			if err != nil {
				return fmt.Errorf("%s: rows copied: %w", ph.ID(), err)
			}
			if copied != want {
				return fmt.Errorf("%s: copied %d of %d rows", ph.ID(), copied, want)
			}
			if err := h.Fail(hooks.FailpointRebuildCopied); err != nil {
				return err
			}
		}
		k++
	}
	return nil
}

// checkViolations counts each GuardForeignKeys's violations again once the
// phase's statements ran: more than before (violations, one per such
// guard, in order) fails the phase.
func checkViolations(ctx context.Context, q core.Querier, ph ops.Phase, violations []int64) error {
	k := 0
	for _, g := range ph.Guards {
		if g.Kind != ops.GuardForeignKeys {
			continue
		}
		after, err := countRows(ctx, q, g.Queries)
		if err != nil {
			return fmt.Errorf("%s: %w", ph.ID(), err)
		}
		if before := violations[k]; after > before {
			return fmt.Errorf("%s: introduced %d foreign-key violations", ph.ID(), after-before)
		}
		k++
	}
	return nil
}

// refuseNulls fails with ErrNullRow, naming the row, when the guard's query
// finds a NULL the phase could not keep.
func refuseNulls(ctx context.Context, q core.Querier, ph ops.Phase, g ops.Guard) error {
	vals := make([]sql.NullString, len(g.Names))
	dest := make([]any, len(vals))
	for i := range vals {
		dest[i] = &vals[i]
	}
	err := q.QueryRowContext(ctx, g.Query).Scan(dest...)
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s: look for a NULL %s: %w", ph.ID(), g.Column, err)
	}
	row := make([]string, len(g.Names))
	for i, n := range g.Names {
		v := "NULL"
		if vals[i].Valid {
			v = strconv.Quote(vals[i].String)
		}
		row[i] = n + " " + v
	}
	return fmt.Errorf("%s: %w: %s row (%s) holds NULL in %s, which has no DEFAULT to fill it; the table is left as it was — give the row a value in %s or delete it, and the next boot rebuilds",
		ph.ID(), ops.ErrNullRow, ph.Table, strings.Join(row, ", "), g.Column, g.Column)
}

// countRows counts the rows the queries return, together.
func countRows(ctx context.Context, q core.Querier, queries []string) (int64, error) {
	var total int64
	for _, query := range queries {
		rows, err := q.QueryContext(ctx, query)
		if err != nil {
			return 0, err
		}
		for rows.Next() {
			total++
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return 0, err
		}
	}
	return total, nil
}

func prevTable(groups [][]ops.Phase, i, j int) string {
	if j > 0 {
		return groups[i][j-1].Table
	}
	g := groups[i-1]
	return g[len(g)-1].Table
}
