package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/schemastate/schemastate/internal/declare"
	"github.com/schemastate/schemastate/internal/hooks"
	"github.com/schemastate/schemastate/internal/readonly"
	"github.com/schemastate/schemastate/internal/tool/bench/render"
	"github.com/schemastate/schemastate/reconcile"
)

// rowsFamily generates one small legacy store and measures, at each size of
// cfg.Rows, the rebuild (or constraint swap), the steady-state boot and live
// capture on a task_session_subagents table of that many rows.
func (b *bench) rowsFamily(ctx context.Context, rep *render.Report) error {
	if _, err := b.generate(ctx, rep, render.FamilyRows, b.cfg.RowsStoreMB, 1); err != nil {
		return err
	}
	if err := b.keepBase(ctx); err != nil {
		return err
	}
	// One untimed pass first: it creates the other owned tables, so the
	// timed reconciles do nothing but the subagents migration.
	if _, err := reconcile.Reconcile(ctx, b.db, reconcile.WithLogger(b.quiet)); err != nil {
		return err
	}
	for _, n := range b.cfg.Rows {
		b.say("filling task_session_subagents to %d rows", n)
		if err := b.fill(ctx, n); err != nil {
			return err
		}
		if b.cfg.wants(render.Rebuild, render.ConstraintSwap) {
			if err := b.rebuild(ctx, rep, n); err != nil {
				return err
			}
		}
		if n <= b.on.lockUpTo && b.cfg.wants(render.ConstraintSwap) {
			if err := b.lock(ctx, rep, n); err != nil {
				return err
			}
		}
		// The store is now reconciled from the legacy state at this size.
		if _, err := reconcile.Reconcile(ctx, b.db, reconcile.WithLogger(b.quiet)); err != nil {
			return err
		}
		if b.cfg.wants(render.SteadyState) {
			if err := b.steady(ctx, rep, render.FamilyRows, n, 0); err != nil {
				return err
			}
		}
		if b.cfg.wants(render.Capture, render.CaptureConcurrent) {
			if err := b.capture(ctx, rep, n); err != nil {
				return err
			}
		}
		if b.cfg.PoolerDSN != "" && b.cfg.wants(render.PoolerBoot, render.PoolerSteady, render.PoolerCapture, render.PoolerCaptureConcurrent) {
			if err := b.pooler(ctx, rep, n); err != nil {
				return err
			}
		}
	}
	return nil
}

// rebuild measures a boot on the legacy store of n rows — the SQLite table
// rebuild, or the PostgreSQL constraint swap, whole Reconcile in process —
// against the hand-written migration on the same rows, with the anchors.
func (b *bench) rebuild(ctx context.Context, rep *render.Report, n int) error {
	m := b.on.rebuild
	m.Family, m.N, m.Rows = render.FamilyRows, n, n
	if b.on.rebuildLarge > 0 && n >= largeRebuild {
		m.Target = b.on.rebuildLarge
	}
	floor, err := b.on.rebuildFloor(b.legacyColumns)
	if err != nil {
		return err
	}
	ours := &rebuildRuns{sampledRuns: sampledRuns{b: b, ctx: ctx, n: n}, name: m.Name}
	floorRun := func(int) (time.Duration, error) {
		if err := b.restoreLegacy(ctx); err != nil {
			return 0, err
		}
		return b.handMigration(ctx, floor)
	}
	// The disk's rate right before this size's runs: the physical limit
	// below uses it.
	if err := b.disk(rep); err != nil {
		return err
	}
	if err := b.restoreLegacy(ctx); err != nil {
		return err
	}
	fixed, err := b.fixedCosts(ctx)
	if err != nil {
		return err
	}
	if err := b.measure(&m, b.cfg.runsAt(n), ours.run, floorRun, b.rebuildAnchors(ctx, n)...); err != nil {
		return err
	}
	m.Fixed = fixed
	ours.keepMemory(rep)
	if err := b.physicalLimit(ctx, rep, &m, floor); err != nil {
		return err
	}
	m.Detail = fmt.Sprintf("shape step (and widen) %s median, of which executing the planned statements %s; the rest of ours is the boot around it",
		median(ours.shapeSteps).Round(time.Microsecond), median(ours.applies).Round(time.Microsecond))
	rep.Measurements = append(rep.Measurements, m)
	return nil
}

// largeRebuild is the size from which a rebuild has its own target
// (dialectBench.rebuildLarge).
const largeRebuild = 100_000

// rebuildRuns is ours: a reconcile of the legacy store, timed whole, with
// the shape (and widen) steps' time and the planned statements' time inside
// it kept per run.
type rebuildRuns struct {
	sampledRuns
	name                string
	shapeSteps, applies []time.Duration
}

func (r *rebuildRuns) run(run int) (time.Duration, error) {
	b, ctx := r.b, r.ctx
	if err := b.restoreLegacy(ctx); err != nil {
		return 0, err
	}
	var tApply, tApplied time.Time
	progress := func(p reconcile.Progress) {
		if p.Step == reconcile.StepShape && p.Message == "applying task_session_subagents" {
			tApply = time.Now()
		}
	}
	fp := func(point string) error {
		if point == hooks.FailpointShapeApplied {
			tApplied = time.Now()
		}
		return nil
	}
	el, rep, err := b.sampledReconcile(hooks.With(ctx, hooks.Hooks{Failpoint: fp}), run, &r.mem, render.FamilyRows, r.n, r.name, reconcile.WithProgress(progress))
	if err != nil {
		return 0, err
	}
	s := rep.Step(reconcile.StepShape)
	if s == nil || s.Status != reconcile.Applied {
		return 0, fmt.Errorf("%w: shape step %v", errUnexpected, s)
	}
	d := s.Duration
	if w := rep.Step(reconcile.StepWiden); w != nil {
		d += w.Duration
	}
	r.shapeSteps = append(r.shapeSteps, d)
	if !tApply.IsZero() && !tApplied.IsZero() {
		r.applies = append(r.applies, tApplied.Sub(tApply))
	}
	return el, nil
}

// rebuildAnchors are the tools a host would pick instead, each from the
// legacy store, in this order so the last run leaves ours (or the host's)
// end state behind.
func (b *bench) rebuildAnchors(ctx context.Context, n int) []anchorRun {
	from := func(run func() (time.Duration, error)) func(int) (time.Duration, error) {
		return func(int) (time.Duration, error) {
			if err := b.restoreLegacy(ctx); err != nil {
				return 0, err
			}
			return run()
		}
	}
	anchors := []anchorRun{{render.AnchorAtlas, b.on.atlasIs, from(func() (time.Duration, error) { return b.amended(ctx, n)(b.atlasApply(ctx)) })}}
	if b.on.hostAnchor {
		anchors = append(anchors, anchorRun{render.AnchorHost, hostIs, from(func() (time.Duration, error) { return b.amended(ctx, n)(b.hostRecreate(ctx)) })})
	}
	if b.cfg.Exe != "" {
		anchors = append(anchors, anchorRun{render.AnchorCLI, "`schemastate reconcile --db …` as a child process, wall time (process start, open, the same Reconcile)",
			from(func() (time.Duration, error) { return b.cli("reconcile", "--db", b.dsn) })})
	}
	return anchors
}

// physicalLimit adds the anchor of the table and its indexes as the floor
// wrote them, at this disk's sequential write rate.
func (b *bench) physicalLimit(ctx context.Context, rep *render.Report, m *render.Measurement, floor []string) error {
	if err := b.restoreLegacy(ctx); err != nil {
		return err
	}
	if _, err := b.handMigration(ctx, floor); err != nil {
		return err
	}
	var err error
	if m.Bytes, err = b.tableBytes(ctx); err != nil {
		return err
	}
	if rate := lastRate(rep); rate > 0 && m.Bytes > 0 {
		m.Anchors = append(m.Anchors, render.Anchor{Name: render.AnchorPhysical,
			Is:     fmt.Sprintf("the rebuilt table and its indexes (%.1f MiB) written once at the disk's sequential rate (%.0f MiB/s, measured in this run)", float64(m.Bytes)/(1<<20), rate/(1<<20)),
			Median: time.Duration(float64(m.Bytes) / rate * float64(time.Second))})
	}
	return nil
}

// fixedCosts times, on the legacy store as it stands, the parts of ours
// that do not depend on what changes: evaluating schema.hcl, Atlas's
// inspection of the owned table, the whole inspect+diff+plan, the
// foreign-key checks, and a process start.
func (b *bench) fixedCosts(ctx context.Context) ([]render.Cost, error) {
	var out []render.Cost
	add := func(name string, fn func() error) error {
		d, err := medianOf(3, fn)
		if err != nil {
			return fmt.Errorf("fixed cost %q: %w", name, err)
		}
		out = append(out, render.Cost{Name: name, Median: d})
		return nil
	}
	schema, err := readonly.SchemaName(ctx, b.db, b.d)
	if err != nil {
		return nil, err
	}
	if err := add("HCL evaluation (declare.Load)", func() error {
		_, err := declare.Load("", b.d, schema)
		return err
	}); err != nil {
		return nil, err
	}
	if err := add("Atlas inspection of task_session_subagents", func() error { return b.atlasInspect(ctx, schema) }); err != nil {
		return nil, err
	}
	if err := add("inspect + diff + plan (reconcile.Plan, no lock)", func() error {
		_, err := reconcile.Plan(ctx, b.db)
		return err
	}); err != nil {
		return nil, err
	}
	if len(b.on.rebuildChecks) > 0 {
		if err := add("foreign_key_check before and after, and the row count", func() error {
			for _, q := range b.on.rebuildChecks {
				if err := drainQuery(ctx, b.db, q); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			return nil, err
		}
	}
	if b.cfg.Exe != "" {
		if err := add("process start (`schemastate help`)", func() error {
			_, err := b.cli("help")
			return err
		}); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// amended checks, after an anchor ran, that it reached the declared end
// state on every row: n rows, each with agent_execution_id 'unknown'. An
// anchor that loses rows or leaves the old shape is reported as failed.
func (b *bench) amended(ctx context.Context, n int) func(time.Duration, error) (time.Duration, error) {
	return func(d time.Duration, err error) (time.Duration, error) {
		if err != nil {
			return 0, err
		}
		var rows, unknown int
		if err := b.db.QueryRowContext(ctx, `SELECT COUNT(*), COUNT(CASE WHEN agent_execution_id = 'unknown' THEN 1 END) FROM task_session_subagents`).Scan(&rows, &unknown); err != nil {
			return 0, fmt.Errorf("after the run: %w", err)
		}
		if rows != n || unknown != n {
			return 0, fmt.Errorf("%w: after the run the table holds %d rows, %d of them with agent_execution_id 'unknown', of %d", errUnexpected, rows, unknown, n)
		}
		return d, nil
	}
}

func lastRate(rep *render.Report) float64 {
	if len(rep.Disk) == 0 {
		return 0
	}
	return rep.Disk[len(rep.Disk)-1].BytesPerSec
}

// messagesPoint generates a store of about n messages and measures, on it,
// health, the steady-state boot and the backfill.
func (b *bench) messagesPoint(ctx context.Context, rep *render.Report, n int) error {
	scale := float64(n) * bytesPerMessage / (1 << 20)
	sum, err := b.generate(ctx, rep, render.FamilyMessages, scale, 0)
	if err != nil {
		return err
	}
	if err := b.keepBase(ctx); err != nil {
		return err
	}
	// Reconciled from legacy: capture_since in the middle of the history,
	// the window health reads.
	if _, err := reconcile.Reconcile(ctx, b.db, reconcile.WithLogger(b.quiet)); err != nil {
		return err
	}
	if b.cfg.wants(render.Health) {
		if err := b.health(ctx, rep, n, sum.Messages); err != nil {
			return err
		}
	}
	if b.cfg.wants(render.SteadyState) {
		if err := b.steady(ctx, rep, render.FamilyMessages, n, sum.Messages); err != nil {
			return err
		}
	}
	if !b.cfg.wants(render.Backfill) {
		return nil
	}
	// Last: it leaves a store activated now.
	return b.backfill(ctx, rep, n, sum)
}
