package reconcile

import "github.com/schemastate/schemastate/reconcile/internal/core"

// Drift is one index, foreign key or check on an owned table that the
// declaration does not declare (the drift policy: reconcile/internal/core's
// drift.go).
type Drift = core.Drift

// WithPrune makes the shape step drop the drift it finds instead of keeping
// it: `reconcile --prune`. Never the default.
func WithPrune() Option { return func(o *options) { o.prune = true } }
