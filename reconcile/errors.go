package reconcile

import (
	"errors"

	"github.com/schemastate/schemastate/reconcile/internal/core"
)

// The errors a host can test for with errors.Is on what Reconcile returns.
// A failed step is a *StepError (matching ErrStepFailed) whose cause keeps
// its chain, so the sentinels below are reachable through it, as is the
// database's own error (errors.As(err, &pgErr)). Every other cause (a
// destructive change refused, a host table missing, a declaration this
// release's writer cannot write, rows that break a
// declared constraint, a table lock not acquired in its budget) names
// itself in the error's message and in the failed step (Report.Step).
var (
	// ErrStepFailed matches (errors.Is) every error Reconcile returns for a
	// failed step.
	ErrStepFailed = errors.New("reconcile: step failed")
	// ErrLockHeld is the cause of a failed lock step whose lock stayed taken
	// for the whole lock wait (WithLockWait): on PostgreSQL another reconcile
	// (another replica) held the advisory lock; on SQLite the database's write
	// lock was held, by another reconcile or by a host writer.
	ErrLockHeld = core.ErrLockHeld
	// ErrInvalidOption is returned, naming the option, by Reconcile, Plan and
	// Observe when an option's value cannot be used; nothing runs.
	ErrInvalidOption = errors.New("reconcile: invalid option")
)

// StepError is one failed step: its name and the error that failed it, with
// that error's chain intact, so a host can test errors.Is(err,
// context.Canceled) or errors.As(err, &pgErr) (a *pgconn.PgError on
// PostgreSQL, a modernc *sqlite.Error on SQLite) on what Reconcile returns.
// It matches ErrStepFailed.
type StepError struct {
	Step string
	Err  error
}

func (e *StepError) Error() string { return "reconcile: step " + e.Step + " failed: " + e.Err.Error() }

// Unwrap returns the error that failed the step.
func (e *StepError) Unwrap() error { return e.Err }

// Is reports whether target is ErrStepFailed.
func (e *StepError) Is(target error) bool { return target == ErrStepFailed }
