package reconcile

import (
	"github.com/schemastate/schemastate/internal/ops"
	"github.com/schemastate/schemastate/reconcile/internal/postgres/pgsession"
	"github.com/schemastate/schemastate/reconcile/internal/postgres/rebuild"
)

// The reconcile's test hooks, for its own tests: the options below are no
// part of the public API (a test outside the package passes internal/hooks
// in its context).
var (
	WithFailpoint      = withFailpoint
	WithExecHook       = withExecHook
	WithClock          = withClock
	WithObserver       = withObserver
	WithConcurrentWait = withConcurrentWait
	WithCopyPause      = withCopyPause
	WithCopyBatchPages = withCopyBatchPages
	WithDDLLockAttempt = withDDLLockAttempt
	WithDDLLockTimeout = withDDLLockTimeout
	ReadQuoted         = rebuild.ReadQuoted
)

type Event = event

const (
	EventFailpoint = eventFailpoint
	EventExecuted  = eventExecuted
	EventProgress  = eventProgress
)

const (
	DurationMetric   = durationMetric
	RowsMetric       = rowsMetric
	StepsMetric      = stepsMetric
	PlannerVersion   = plannerVersion
	LockAdvisoryXact = pgsession.LockAdvisoryXact
	LockSQLiteWrite  = string(ops.LockSQLiteWrite)
)
