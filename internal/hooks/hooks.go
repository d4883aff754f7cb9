// Package hooks carries the hooks that are no part of the module's public
// API: the reconcile's test hooks — a failpoint function called at each
// named failpoint (failpoints.go), a function told each statement a plan
// phase ran, and the clock the activation keys are sampled from — and the
// live writer's, which compat sets: another release's writer contract to
// write by, and a start without the table's check. A caller passes them in
// the context it gives Reconcile or capture.NewWriter (With); each reads
// them once, when it starts (From). A context without them changes nothing.
package hooks

import (
	"context"
	"time"

	"github.com/schemastate/schemastate/internal/contract"
)

// Hooks are the test hooks of one reconcile. A nil field is no hook.
type Hooks struct {
	// Failpoint is called at each named failpoint; an error it returns
	// fails the step exactly as a database error would.
	Failpoint func(point string) error
	// Executed is called with each statement of a plan phase once the
	// database executed it.
	Executed func(stmt string)
	// Now is the clock execution_since and capture_since are sampled from.
	Now func() time.Time
	// Writer, read by capture.NewWriter, is the writer contract its Writer
	// writes by in place of this release's: compat writes the frame corpus
	// by another release's contract (its columns and conflict target).
	Writer *contract.Writer
	// Unchecked makes capture.NewWriter start without judging the table:
	// compat writes through a writer that would have refused, to name each
	// frame the table rejects.
	Unchecked bool
}

type key struct{}

// With returns ctx carrying h.
func With(ctx context.Context, h Hooks) context.Context {
	return context.WithValue(ctx, key{}, h)
}

// From returns the hooks ctx carries (With), or none.
func From(ctx context.Context) Hooks {
	h, _ := ctx.Value(key{}).(Hooks)
	return h
}
