package ops

import "errors"

// The causes a step's failure can wrap besides the reconcile's public
// errors: each is reachable with errors.Is through the *StepError Reconcile
// returns, and its message says what happened and what to do.
var (
	// ErrUnsafeName is wrapped by the refusal of a name that cannot be
	// rendered into SQL safely (ident.go): one in schema.hcl (the error gives
	// its position), or one in the live catalog that a change would have
	// Atlas render. The error names it; nothing is run.
	ErrUnsafeName = errors.New("name refused: not a plain identifier (ASCII letters, digits and underscores, not starting with a digit)")
	// ErrNotOneStatement is wrapped by the refusal of a SQLite text that
	// would run as more than one statement (sqlite_ident.go): a name or
	// check expression read off the catalog that Atlas would render or
	// query with unbalanced quotes or comments. The error quotes the text;
	// nothing of it is run.
	ErrNotOneStatement = errors.New("refused: the SQL text is more than one SQLite statement")
	// ErrLockLost is the cause of a phase or step stopped before it ran
	// because the reconcile no longer holds its lock (PostgreSQL: the lock's
	// transaction ended, its connection lost or timed out by the server):
	// another replica may hold it now, so this one runs nothing more.
	ErrLockLost = errors.New("the reconcile lost its lock")
	// ErrStatementPooler is the cause of a failed lock step behind a
	// statement-mode pooler (PgBouncer pool_mode = statement), which refuses
	// the transaction the PostgreSQL lock lives in: exclusion between
	// replicas cannot be guaranteed there, so the reconcile changes nothing.
	ErrStatementPooler = errors.New("a statement-mode connection pooler sits between the reconcile and PostgreSQL")
	// ErrNullRow is wrapped by a SQLite rebuild refused because a row holds
	// NULL in a column the declaration makes NOT NULL with no DEFAULT: the
	// copy could not keep the row. The error names the row; give it a value
	// (or delete it) and the next boot rebuilds.
	ErrNullRow = errors.New("a row holds NULL where the declaration says NOT NULL")
	// ErrPhaseBlocked is wrapped by a phase stopped before it ran by an
	// object that would make it fail (a view over a column being replaced).
	ErrPhaseBlocked = errors.New("blocked")
	// ErrBudgetSpent stops an online phase between two batches once the
	// boot's online budget is spent (WithOnlineBudget); the widen step is
	// then InProgress, not failed.
	ErrBudgetSpent = errors.New("online budget spent")
	// ErrRefused is the cause of the refused step: the declaration asks for
	// a change that would destroy data, which is never applied at boot.
	ErrRefused = errors.New("refused destructive change")
	// ErrWriterBreak is the cause of a failed shape step whose declaration
	// this release's writers could not write every row to (writers.json):
	// nothing was applied. Ship the change in two releases, writer first
	// (docs/parity-and-lint.md), or apply it WithAllowWriterBreak.
	ErrWriterBreak = errors.New("the declaration breaks this release's writer")
	// ErrRowsBreakConstraint is wrapped by an online recipe's check_rows or
	// validate phase that found rows breaking the constraint it adds (a
	// NULL, a check, an orphan): the error names the table, the constraint,
	// how many rows and a few of their keys, and nothing is left behind.
	ErrRowsBreakConstraint = errors.New("rows break a declared constraint")
	// ErrLockNotAcquired is wrapped by a phase that could not get its table
	// lock within its budget.
	ErrLockNotAcquired = errors.New("table lock not acquired within the budget")
	// ErrStatementTimeout is the cause of a step refused before its first
	// phase: a statement it must run outside a transaction (a CREATE INDEX
	// CONCURRENTLY) would be cancelled by the session's statement_timeout,
	// which the reconcile may not lift on that connection (behind a
	// pooler). The error names the setting, where it comes from and the fix;
	// nothing ran, and the next boot tries again.
	ErrStatementTimeout = errors.New("statement_timeout would cancel a statement the reconcile runs outside a transaction")
	// ErrHostTablesMissing is the cause of a failed host_tables step: a table
	// the module needs from the host is absent (schemastate never creates
	// host tables).
	ErrHostTablesMissing = errors.New("host tables missing")
)
