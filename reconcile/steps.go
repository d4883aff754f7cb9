package reconcile

import (
	"context"
	"database/sql"

	"github.com/schemastate/schemastate/internal/declare"
	"github.com/schemastate/schemastate/reconcile/internal/core"
)

// boot is what the steps of one reconcile hand each other, as values.
type boot struct {
	db    *sql.DB
	sess  core.Session
	decl  *declare.Declaration
	plan  *ShapePlan
	clean bool // the full check found nothing to change (shape)
	es    EndState
}

// bootStep is one row of the step table.
type bootStep struct {
	name string
	// run runs the step; false ends the boot there.
	run func(r *run, ctx context.Context, b *boot) bool
	// always: reported Skipped when an earlier step ends the boot
	// (skipRest); refused and widen appear only when they apply.
	always bool
	// certified is what a certified boot reports of the step, Unchanged
	// (fastPath); "" when it reports nothing (the lock records its own).
	certified string
}

// bootSteps is the step table: the spec's sequence in order, which drives
// the steps, the skip of those an ended boot did not reach, and what a
// certified boot reports.
func bootSteps() []bootStep {
	return []bootStep{
		{StepLock, func(r *run, ctx context.Context, b *boot) (ok bool) {
			b.sess, ok = r.lock(ctx, b.db)
			return ok
		}, true, ""},
		{StepHostTables, func(r *run, ctx context.Context, b *boot) (ok bool) {
			if b.decl, ok = r.hostTables(ctx, b.sess); !ok {
				b.sess.Abort()
			}
			return ok
		}, true, "present (certified)"},
		{StepShape, func(r *run, ctx context.Context, b *boot) bool {
			b.plan, b.clean = r.shape(ctx, b.sess, b.decl)
			return true
		}, true, "declared shape holds (certified: catalog unchanged since the last full check)"},
		{StepRefused, func(r *run, _ context.Context, b *boot) bool {
			r.refuse(b.plan)
			return true
		}, false, ""},
		{StepWiden, func(r *run, ctx context.Context, b *boot) bool {
			r.widen(ctx, b.sess, b.decl, b.plan)
			return true
		}, false, ""},
		{StepExecutionSince, func(r *run, ctx context.Context, b *boot) bool {
			b.es = r.executionSince(ctx, b.sess, b.decl, b.clean)
			return true
		}, true, "key already present"},
		{StepBackfill, func(r *run, ctx context.Context, b *boot) bool {
			r.backfill(ctx, b.sess, b.es)
			return true
		}, true, "both backfill keys present"},
	}
}
