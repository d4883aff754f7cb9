package reconcile

import (
	"context"
	"fmt"

	"github.com/schemastate/schemastate/internal/ops"
	"github.com/schemastate/schemastate/reconcile/internal/core"
)

// Connection settings a reconcile changes and gives back: SQLite's session
// pragmas (reconcile/internal/sqlite) and a phase's setting guard (ops.GuardSetting, run by
// runPhase). A setting that cannot be given back takes its connection out
// of the host's pool with it.

// setting sets a setting guard's setting for the phase and returns what
// gives it back its value: a restore that fails has the session discard the
// connection (phaseHooks.discard), or fails the phase where it cannot.
func (r *run) setting(ctx context.Context, q core.Querier, ph ops.Phase, g ops.Guard, h core.PhaseHooks) (restore func() error, err error) {
	var was string
	if err := q.QueryRowContext(ctx, g.Read).Scan(&was); err != nil {
		return nil, fmt.Errorf("%s: %w", ph.ID(), err)
	}
	if _, err := q.ExecContext(ctx, g.Set); err != nil {
		return nil, fmt.Errorf("%s: %w", ph.ID(), err)
	}
	return func() error {
		err := core.RestoreSetting(q, h.Fail, r.o.logger, g.Read, fmt.Sprintf(g.Restore, was), was)
		if err == nil || h.Discard == nil {
			return err
		}
		h.Discard(fmt.Errorf("%s: %w", ph.ID(), err))
		return nil
	}, nil
}
