package reconcile

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/schemastate/schemastate/internal/hooks"
	"github.com/schemastate/schemastate/internal/ops"
)

// Connection settings a reconcile changes and gives back: SQLite's session
// pragmas (sqlite.go) and a phase's setting guard (ops.GuardSetting, run by
// runPhase). A setting that cannot be given back takes its connection out
// of the host's pool with it.

// connDiscarder is a session whose pinned connection a phase's setting
// (ops.GuardSetting) can leave changed: one that failed to restore is
// closed rather than returned to the host's pool (SQLite's session). The
// PostgreSQL session is none: it sets every setting with SET LOCAL, which
// ends with its transaction, and plans no setting guard.
type connDiscarder interface {
	discard(why error)
}

// setting sets a setting guard's setting for the phase and returns what
// gives it back its value: a restore that fails has the session discard the
// connection (phaseHooks.discard), or fails the phase where it cannot.
func (r *run) setting(ctx context.Context, q querier, ph ops.Phase, g ops.Guard, h phaseHooks) (restore func() error, err error) {
	var was string
	if err := q.QueryRowContext(ctx, g.Read).Scan(&was); err != nil {
		return nil, fmt.Errorf("%s: %w", ph.ID(), err)
	}
	if _, err := q.ExecContext(ctx, g.Set); err != nil {
		return nil, fmt.Errorf("%s: %w", ph.ID(), err)
	}
	return func() error {
		err := restoreSetting(q, h.fail, r.o.logger, g.Read, fmt.Sprintf(g.Restore, was), was)
		if err == nil || h.discard == nil {
			return err
		}
		h.discard(fmt.Errorf("%s: %w", ph.ID(), err))
		return nil
	}, nil
}

// restoreSetting gives a connection setting back the value it had: restore
// runs, then read must read want (SQLite ignores a foreign_keys pragma inside
// a transaction, and says nothing). It runs whether or not the reconcile was
// canceled. A failure is logged at WARN, naming the setting by its read, and
// returned.
func restoreSetting(q querier, fail func(string) error, logger *slog.Logger, read, restore, want string) error {
	ctx := context.Background()
	err := fail(hooks.FailpointSettingRestore(read))
	if err == nil {
		_, err = q.ExecContext(ctx, restore)
	}
	if err == nil {
		var got string
		if err = q.QueryRowContext(ctx, read).Scan(&got); err == nil && got != want {
			err = fmt.Errorf("reads %s after %s", got, restore)
		}
	}
	if err != nil {
		err = fmt.Errorf("restore %s: %w", read, err)
		logger.Warn("connection setting not restored", "setting", read, "error", err)
	}
	return err
}
