// Package reconcile keeps the tables this module owns (task_session_subagents,
// as schema.hcl declares it) in their declared shape, on SQLite and
// PostgreSQL. A host calls Reconcile once on every boot with its *sql.DB:
//
//	rep, err := reconcile.Reconcile(ctx, db, reconcile.WithLogger(logger))
//
// Reconcile never aborts the boot. A failed step is logged at WARN by name,
// leaves the database as it was and is retried on the next boot; err (also
// rep.Err()) is a *StepError per failed step, matching ErrStepFailed and
// keeping its cause's chain. When nothing needs changing it runs no DDL and
// takes no lock. Plan is the dry run (what Reconcile would execute now) and
// Observe the read-only status; neither takes a lock or changes anything.
// Spans and metrics go through the host's own OpenTelemetry providers
// (WithTracerProvider, WithMeterProvider) and nowhere without them.
//
// What a Reconcile does, in the spec's order:
//
//	lock → host tables → shape (inspect, diff, plan, apply) → [refused] →
//	[widen, PostgreSQL] → execution_since (observe the end state, write the
//	key) → backfill
//
// Before the lock (and again right after it, for a boot that had to take it),
// a boot whose live catalog and declaration match the certificate the last
// full check recorded takes the fast path: no lock and none of the later
// steps (fingerprint.go). Indexes, foreign keys and checks the declaration
// does not name are kept and reported, never dropped unless asked
// (WithPrune; drift.go). On PostgreSQL a table at or above WithOnlineAbove is
// changed in online phases whose every exclusive lock is catalog-only and
// short (docs/reconcile.md).
//
// Everything a dialect decides sits behind one driver (core.Driver, in
// reconcile/internal/core), chosen once per call; reconcile/internal/sqlite
// and reconcile/internal/postgres implement it, each in a package of its own.
// The plan is a value, a list of typed phases (internal/ops), and one applier
// runs it on both dialects (apply.go).
package reconcile

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/schemastate/schemastate/backfill"
	"github.com/schemastate/schemastate/internal/declare"
	"github.com/schemastate/schemastate/internal/hooks"
	"github.com/schemastate/schemastate/internal/instant"
	"github.com/schemastate/schemastate/internal/ops"
	"github.com/schemastate/schemastate/keys"
	"github.com/schemastate/schemastate/reconcile/internal/core"
)

// Step names, as logged and reported.
const (
	StepLock       = "lock"
	StepHostTables = "host_tables"
	StepShape      = "shape"
	// StepRefused appears only when the declaration asks for a change that
	// would destroy data; it names each one and changes nothing.
	StepRefused = "refused"
	// StepWiden appears only on PostgreSQL when a column's type is widened:
	// its own transaction, after the shape step (see splitWidenings).
	StepWiden          = "widen"
	StepExecutionSince = "execution_since"
	StepBackfill       = "backfill"
)

// run carries one Reconcile's report and its progress reporting through the
// steps; what one step hands the next is passed as a value (steps).
type run struct {
	mu        sync.Mutex
	doing     string
	stepStart time.Time
	o         *call
	drv       core.Driver
	rep       *Report
	// traceCtx carries the Reconcile's span (root) when a tracer provider
	// was given (trace.go); open is the span of the step running phases.
	traceCtx context.Context
	root     trace.Span
	// meters count the steps (WithMeterProvider; nil: nothing counted).
	meters   *meters
	open     trace.Span
	openName string
	compared *comparedCatalog // readCompared
}

// Reconcile brings the declared tables to their declared shape, writes
// subagent_context_execution_since from the observed end state, and runs the
// guarded backfill. It never panics on database errors and never leaves a
// partial change: the returned Report describes every step, and the error
// (Report.Err: a *StepError per failed step, matching ErrStepFailed and
// keeping its cause) is for logging and inspection — the host's boot goes on.
func Reconcile(ctx context.Context, db *sql.DB, opts ...Option) (*Report, error) {
	o, drv, err := newOptions(ctx, db, opts)
	if err != nil {
		return &Report{}, err
	}
	start := time.Now()
	r := &run{o: newCall(o), drv: drv, rep: &Report{Dialect: o.dialect, Lock: drv.LockMechanism()}, meters: newMeters(o.meters)}
	if o.tracer != nil {
		ctx = r.beginTrace(ctx)
	}
	r.steps(ctx, db)
	r.endTrace()
	r.meters.observe(time.Since(start), r.rep)
	return r.rep, r.rep.Err()
}

// steps runs the step table (bootSteps) in order. Each step records its
// outcome in the report and hands what the next one needs through boot.
func (r *run) steps(ctx context.Context, db *sql.DB) {
	b := &boot{db: db}
	for _, s := range bootSteps() {
		if !s.run(r, ctx, b) {
			return
		}
	}
	r.finish(ctx, db, b.sess)
}

// lock opens the session and takes the cross-replica lock, unless the
// certificate holds (fingerprint.go): checked first without the lock, so a
// boot with nothing to do never waits for a host writer or another replica,
// and again under it, so a replica that waited finds the work done. It
// returns false when the boot is over: certified, or the lock not acquired.
func (r *run) lock(ctx context.Context, db *sql.DB) (core.Session, bool) {
	start := time.Now()
	sess, err := r.drv.Open(ctx, db, r.o.config())
	if err != nil {
		r.record(Step{Name: StepLock, Status: Failed, Detail: err.Error(), Err: err, Duration: time.Since(start)})
		r.skipRest(StepHostTables, "lock not acquired")
		return nil, false
	}
	if ks, ok := r.certified(ctx, sess); ok {
		r.fastPath(ctx, sess, ks, Step{Name: StepLock, Status: Unchanged, Detail: "not taken: the certificate holds", Duration: time.Since(start)})
		return nil, false
	}
	r.o.logger.Debug("reconcile: no certificate holds; taking the lock for a full check")
	if err := sess.Lock(ctx); err != nil {
		sess.Abort()
		r.record(Step{Name: StepLock, Status: Failed, Detail: err.Error(), Err: err, Duration: time.Since(start)})
		r.skipRest(StepHostTables, "lock not acquired")
		return nil, false
	}
	locked := Step{Name: StepLock, Status: Applied, Detail: fmt.Sprintf("acquired in %s", time.Since(start).Round(time.Millisecond)), Duration: time.Since(start)}
	if ks, ok := r.certified(ctx, sess); ok {
		r.fastPath(ctx, sess, ks, locked)
		return nil, false
	}
	r.record(locked)
	return sess, true
}

// hostTables loads the declaration and checks the host tables exist.
func (r *run) hostTables(ctx context.Context, sess core.Session) (*declare.Declaration, bool) {
	decl, err := r.o.loadDeclaration(r.drv, sess.SchemaName())
	if err != nil {
		r.record(Step{Name: StepHostTables, Status: Failed, Detail: err.Error(), Err: err})
		r.skipRest(StepShape, "declaration not loaded")
		return nil, false
	}
	missing, err := missingTables(ctx, r.drv, sess.Querier(), decl.HostTables())
	if err == nil && len(missing) > 0 {
		// Name the schema: on PostgreSQL it is current_schema(), the first
		// schema on search_path that exists, which need not be where the host's
		// own unqualified queries find these tables.
		err = fmt.Errorf("%w: %s (looked in schema %q; schemastate never creates host tables; internal/tool/fixtures/host has a fixture)", ops.ErrHostTablesMissing, strings.Join(missing, ", "), sess.SchemaName())
	}
	if err != nil {
		r.record(Step{Name: StepHostTables, Status: Failed, Detail: err.Error(), Err: err})
		r.skipRest(StepShape, "host tables missing")
		return nil, false
	}
	r.record(Step{Name: StepHostTables, Status: Unchanged, Detail: "present: " + strings.Join(decl.HostTables(), ", ")})
	return decl, true
}

// shape inspects, diffs, plans and applies the shape step's phases (apply.go).
// On a database already in its declared shape it runs no statement at all.
// clean reports that the full check found nothing to change and refused
// nothing, so the live catalog may be certified; plan is nil when planning
// failed.
func (r *run) shape(ctx context.Context, sess core.Session, decl *declare.Declaration) (plan *ShapePlan, clean bool) {
	r.stepOwnTx(ctx, StepShape, func(ctx context.Context) Step {
		r.readCompared(ctx, sess.Querier(), decl)
		var err error
		if plan, err = planShape(ctx, r.drv, sess.Querier(), decl, sess.SchemaName(), r.o.options); err != nil {
			return failed(err)
		}
		r.rep.Drift = plan.Drift()
		r.reportDrift()
		if err := r.writerCheck(ctx, plan, decl); err != nil {
			return failed(err)
		}
		s := r.applyPhases(ctx, sess, StepShape, plan.stepPhases(StepShape))
		if s.Status == Unchanged {
			clean = len(plan.Refused()) == 0 && len(plan.stepPhases(StepWiden)) == 0
			if len(r.rep.Drift) > 0 {
				s.Detail += fmt.Sprintf("; %d undeclared kept", len(r.rep.Drift))
			}
		}
		return s
	})
	return plan, clean
}

// writerCheck stops the shape step before its first phase when the
// declaration breaks this release's writers and there is something to
// apply: the step fails, naming each break, and is retried next boot.
// WithAllowWriterBreak applies it anyway, with a WARN naming each.
func (r *run) writerCheck(ctx context.Context, plan *ShapePlan, decl *declare.Declaration) error {
	breaks := plan.WriterBreaks()
	if len(breaks) == 0 || len(plan.stepPhases(StepShape)) == 0 {
		return nil
	}
	if r.o.allowWriterBreak {
		for _, b := range breaks {
			r.o.logger.WarnContext(ctx, "reconcile: applying a declaration this release's writer cannot write (WithAllowWriterBreak)", "break", b)
		}
		return nil
	}
	return fmt.Errorf("%w (%s): %s; nothing applied: ship the edit in two releases, writer first (docs/parity-and-lint.md), or apply it WithAllowWriterBreak / --allow-writer-break",
		ops.ErrWriterBreak, decl.File, strings.Join(breaks, "; "))
}

// refuse records the destructive changes the plan refused, when it refused
// any: a table with one is left exactly as it is, the other tables still
// reach their shape, and the refusal is its own failed step.
func (r *run) refuse(plan *ShapePlan) {
	if plan == nil {
		return
	}
	if refused := plan.Refused(); len(refused) > 0 {
		err := fmt.Errorf("%w (never applied at boot): %s", ops.ErrRefused, strings.Join(refused, "; "))
		r.record(Step{Name: StepRefused, Status: Failed, Detail: err.Error(), Err: err})
	}
}

// widen applies the widen step's phases (PostgreSQL's type widenings), when
// the plan has any. When the shape step changed the catalog, the widening is
// planned again from it: the rebuild carries the table's indexes and
// constraints as they are once the key is swapped, not as they were.
func (r *run) widen(ctx context.Context, sess core.Session, decl *declare.Declaration, plan *ShapePlan) {
	if plan == nil || len(plan.stepPhases(StepWiden)) == 0 {
		return
	}
	s := r.rep.Step(StepShape)
	if s != nil && s.Status == Failed {
		// The widening is planned for the shape the shape step leaves: a
		// rebuild begun from the old shape would copy into the wrong one.
		r.record(Step{Name: StepWiden, Status: Skipped, Detail: "the shape step failed; the widening follows it (retried next boot)"})
		return
	}
	if s != nil && s.Status == Applied {
		var err error
		if plan, err = planShape(ctx, r.drv, sess.Querier(), decl, sess.SchemaName(), r.o.options); err != nil {
			r.record(Step{Name: StepWiden, Status: Failed, Detail: "plan again after the shape step: " + err.Error(), Err: err})
			return
		}
	}
	if phases := plan.stepPhases(StepWiden); len(phases) > 0 {
		r.stepOwnTx(ctx, StepWiden, func(ctx context.Context) Step { return r.applyWiden(ctx, sess, decl, phases) })
	}
}

// applyWiden applies the widen step's phases. When they fail, the widening
// is planned again from the catalog, and applied again, once, when that plan
// abandons a rebuild: its table was truncated, rewritten or altered under it
// (the copy stopped, or the swap refused), so the rebuild begins again on
// this boot — or its declared shape is now refused, and the rebuild is
// dropped, the refusal recorded. Any other failure stands.
func (r *run) applyWiden(ctx context.Context, sess core.Session, decl *declare.Declaration, phases []ops.Phase) Step {
	s := r.applyPhases(ctx, sess, StepWiden, phases)
	if s.Status != Failed || ctx.Err() != nil {
		return s
	}
	plan, err := planShape(ctx, r.drv, sess.Querier(), decl, sess.SchemaName(), r.o.options)
	if err != nil || !core.AbandonsRebuild(plan.stepPhases(StepWiden)) {
		return s
	}
	if r.rep.Step(StepRefused) == nil {
		r.refuse(plan)
	}
	again := r.applyPhases(ctx, sess, StepWiden, plan.stepPhases(StepWiden))
	again.Detail = s.Detail + "; planned again: " + again.Detail
	return again
}

// finish ends the session and reads the keys the report shows.
func (r *run) finish(ctx context.Context, db *sql.DB, sess core.Session) {
	if err := sess.Close(ctx); err != nil {
		// SQLite commits every step at once; if that fails nothing was kept.
		// (PostgreSQL commits per step; its close never fails a step.)
		r.rep.Certified = false
		for i := range r.rep.Steps {
			if s := &r.rep.Steps[i]; s.Status == Applied && s.Name != StepLock {
				s.Status, s.Detail, s.Err = Failed, "commit failed: "+err.Error(), err
				r.warn(s.Name, err)
			}
		}
	}
	if ks, err := keys.Read(ctx, db, r.o.dialect); err == nil {
		r.rep.Keys, r.rep.KeysRead = ks, true
	}
}

// step runs fn inside its own rollback scope and records the outcome.
func (r *run) step(ctx context.Context, sess core.Session, name string, fn func(context.Context, core.Querier) Step) {
	start := time.Now()
	if err := sess.Holding(ctx); err != nil {
		r.record(Step{Name: name, Status: Failed, Detail: err.Error(), Err: err})
		return
	}
	q, err := sess.Begin(ctx, name)
	if err != nil {
		r.record(Step{Name: name, Status: Failed, Detail: err.Error(), Err: err})
		return
	}
	ctx = r.beginStep(ctx, name)
	stop := r.watch(name)
	s := fn(ctx, q)
	stop(string(s.Status))
	s.Name = name
	s.Duration = time.Since(start)
	if err := sess.End(ctx, s.Status != Failed); err != nil && s.Status != Failed {
		s.Status, s.Detail, s.Err = Failed, "commit: "+err.Error(), err
		if name == StepExecutionSince {
			r.rep.Certified = false // the certificate was written in this step
		}
	}
	r.record(s)
}

// executionSince observes AC-33 clauses 1–3 on the live schema and, when they
// hold, writes subagent_context_execution_since if it is absent (AC-33b). It
// is never gated on whether a rebuild fired: a fresh table, a table created
// from nothing, and an amended table whose earlier key write failed all get
// the key. It returns the end state it observed (zero when it observed none),
// which gates the backfill (AC-33c).
func (r *run) executionSince(ctx context.Context, sess core.Session, decl *declare.Declaration, clean bool) (es EndState) {
	r.step(ctx, sess, StepExecutionSince, func(ctx context.Context, q core.Querier) Step {
		if err := r.o.fail(hooks.FailpointExecutionSinceObserve); err != nil {
			return failed(err)
		}
		var err error
		if es, err = r.observe(ctx, q, decl, sess.SchemaName()); err != nil {
			return failed(err)
		}
		r.rep.EndState, r.rep.EndStateObserved = es, true
		if !es.KeyBearing() {
			return Step{Status: Skipped, Detail: "AC-33 end state not observed: " + strings.Join(es.Missing(), "; ")}
		}
		if err := r.o.fail(hooks.FailpointExecutionSinceWrite); err != nil {
			return failed(err)
		}
		// The key names an instant the end state was observed to hold: sampled
		// after the observation, at the write, never at the transaction's start
		// or before the boot looked.
		wrote, err := keys.WriteOnce(ctx, q, r.o.dialect, keys.ExecutionSince, instant.Format(r.o.now()))
		if err != nil {
			return failed(err)
		}
		if clean && es.IndexesMatchDeclaration {
			r.certify(ctx, q, decl, sess.SchemaName())
		}
		if !wrote {
			return Step{Status: Unchanged, Detail: "key already present"}
		}
		return Step{Status: Applied, Statements: 1, Detail: "end state observed; key written"}
	})
	return es
}

func (r *run) observe(ctx context.Context, q core.Querier, decl *declare.Declaration, schemaName string) (EndState, error) {
	return observeEndState(ctx, r.drv, q, decl, schemaName, nil)
}

// backfill is the last step; it runs only in a pass that observed the AC-33
// end state (AC-33c), so its INSERT never meets a table without
// agent_execution_id. Guarded by both backfill keys (AC-24d); a failure rolls
// back the rows and both keys together and is retried next boot (AC-24a).
func (r *run) backfill(ctx context.Context, sess core.Session, es EndState) {
	r.step(ctx, sess, StepBackfill, func(ctx context.Context, q core.Querier) Step {
		if !es.KeyBearing() {
			return Step{Status: Skipped, Detail: "AC-33c: end state not observed in this pass; retried next boot"}
		}
		// The backfill's failpoints are the reconcile's, told to its
		// observers as every other failpoint is.
		res, err := backfill.Run(hooks.With(ctx, hooks.Hooks{Failpoint: r.o.fail}), q, r.o.dialect,
			backfill.WithClock(r.o.now),
			backfill.WithProgress(func(msg string) { r.progress(StepBackfill, msg) }))
		if err != nil {
			return failed(err)
		}
		if !res.Ran {
			return Step{Status: Unchanged, Detail: "both backfill keys present"}
		}
		rows := res.Inserted
		detail := fmt.Sprintf("inserted %d rows; %s=%q %s=%q", rows,
			keys.BackfillThrough, deref(res.Keys.BackfillThrough), keys.CaptureSince, deref(res.Keys.CaptureSince))
		if res.UnreadableCreatedAt > 0 {
			detail += fmt.Sprintf("; %d qualifying messages skipped: created_at is not a time (first: %s)",
				res.UnreadableCreatedAt, res.FirstUnreadable)
		}
		if res.OversizedMetadata > 0 {
			detail += fmt.Sprintf("; %d candidate messages skipped: metadata longer than %d bytes, not parsed (first: %s)",
				res.OversizedMetadata, backfill.MaxMetadata, res.FirstOversized)
			r.o.logger.Warn("reconcile: the backfill did not parse metadata longer than its limit; no row is derived from those messages",
				"messages", res.OversizedMetadata, "first", res.FirstOversized, "limit_bytes", backfill.MaxMetadata)
		}
		return Step{Status: Applied, Statements: 1, Rows: &rows, Detail: detail}
	})
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func missingTables(ctx context.Context, drv core.Driver, q core.Querier, names []string) ([]string, error) {
	args := make([]any, len(names))
	for i, n := range names {
		args[i] = n
	}
	found, err := core.QueryStrings(ctx, q, drv.TablesQuery(len(names)), args...)
	if err != nil {
		return nil, err
	}
	var missing []string
	for _, n := range names {
		if !contains(found, n) {
			missing = append(missing, n)
		}
	}
	return missing, nil
}
