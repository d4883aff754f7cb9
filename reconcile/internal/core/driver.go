// Package core is what the reconcile's step sequence and each dialect's
// driver share: the driver and session interfaces a dialect implements, the
// plan of one table and the context it is planned in, and the planning
// helpers both dialects use (render, diff, drift, twins, clone). It imports
// neither the sequence (reconcile) nor a dialect: a dialect's package sees
// of the sequence only what this package hands it.
package core

import (
	"context"
	"database/sql"
	"log/slog"
	"time"

	"ariga.io/atlas/sql/migrate"
	"ariga.io/atlas/sql/schema"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/ops"
)

// Querier runs a reconcile's statements: the pinned connection, or the
// transaction of a step.
type Querier = dialect.Querier

// Facts are what a driver reads of a live table beyond Atlas's inspection
// (Driver.Facts), handed back to its own PlanTable: each dialect's own
// type, nil when the table does not exist.
type Facts any

// Driver is everything a dialect decides, chosen once per call. The
// sequence (reconcile), the planning algorithm and the applier are written
// once against it; reconcile/internal/sqlite and reconcile/internal/postgres
// implement it.
type Driver interface {
	Dialect() dialect.Dialect

	// LockMechanism names the session's cross-replica lock (Report.Lock).
	LockMechanism() string
	// Open pins the connection a reconcile runs on (its session).
	Open(ctx context.Context, db *sql.DB, c *Config) (Session, error)
	// SchemaName is the schema a lock-free look (Plan, Observe) works in:
	// main on SQLite, current_schema() on PostgreSQL.
	SchemaName(ctx context.Context, q Querier) (string, error)
	// Atlas is Atlas's driver over q: inspection, diff and SQL rendering.
	Atlas(q Querier) (migrate.Driver, error)

	// TablesQuery selects, of n tables named by parameters 1…n, those that
	// exist in the reconcile's schema.
	TablesQuery(n int) string
	// CatalogScope is read when a certificate is written, in the full
	// check's transaction: what the certified boot's catalog read is keyed
	// on besides the names of the owned and covered tables, as text the
	// certificate keeps ("" where the read goes by name: SQLite). It fails
	// when one of those tables does not exist.
	CatalogScope(ctx context.Context, q Querier, owned, covered []string) (string, error)
	// CatalogRead is the certificate's read of the live catalog: a query
	// and its arguments, whose text rows, in order, are what the
	// certificate's hash covers; ok is false for a scope CatalogScope
	// cannot have written.
	CatalogRead(owned, covered []string, scope string) (query string, args []any, ok bool)

	// Facts reads what planning needs of a live table beyond Atlas's
	// inspection. It reads the catalog only.
	Facts(ctx context.Context, q Querier, schemaName string, live, want *schema.Table) (Facts, error)
	// PlanTable plans one owned table from the inspected live table (nil
	// when it does not exist), its declaration and facts: pure, no database.
	PlanTable(pc *PlanContext, tp *TablePlan, f Facts) error
	// DropSQL renders the drop of an index, foreign key or check of table
	// with the module's own quoting (ident.go: a name Atlas must not render).
	DropSQL(schemaName, table string, c schema.Change) (string, error)
	// Observable is the inspected live table without what cannot serve as
	// the key AC-33 observes (a DEFERRABLE unique on PostgreSQL): a new
	// table, the inspected one left as read.
	Observable(ctx context.Context, q Querier, live *schema.Table) (*schema.Table, error)
	// Explain adds to a statement's error what the database said beyond
	// its message (PostgreSQL's DETAIL and HINT).
	Explain(err error) error
}

// Session is one reconcile's hold on the database: a pinned connection, the
// cross-replica lock once taken, and the transaction scopes of its steps and
// phases.
type Session interface {
	// Lock takes the cross-replica lock; until then the session only reads.
	Lock(ctx context.Context) error
	// Holding is the holder check, run before every phase and step once the
	// lock is taken: an error (matching ErrLockLost) when the session no
	// longer holds the lock.
	Holding(ctx context.Context) error
	Querier() Querier
	// Meta reads the kandev_meta rows named (the activation keys and the
	// certificate: the certified boot's first read) in one statement; the
	// rows absent are absent from the map. A session that has not read its
	// own identity yet (PostgreSQL: the database and schema that name the
	// lock and every statement) reads it in that same statement when any
	// row is there.
	Meta(ctx context.Context, rows *MetaRows) (map[string]string, error)
	// SchemaName is the schema the reconcile works in: main on SQLite, the
	// connection's current_schema() on PostgreSQL. Valid once Meta returned
	// a row, or Lock returned, without an error.
	SchemaName() string
	// Begin and End are the scope of a step that is not made of phases
	// (execution_since, backfill).
	Begin(ctx context.Context, step string) (Querier, error)
	End(ctx context.Context, ok bool) error
	// Transact is the scope of a group of transactional phases: fn may run
	// more than once, each time from the start, when an attempt could not
	// get its locks.
	Transact(ctx context.Context, step, table string, fn func(q Querier) error) error
	// Alone runs a non-transactional phase.
	Alone(ctx context.Context, ph ops.Phase, h PhaseHooks) error
	Close(ctx context.Context) error
	Abort()
}

// PhaseHooks is what the applier lends a session running a phase alone.
type PhaseHooks struct {
	Fail     func(point string) error
	Progress func(msg string)
	// Executed is told each statement once it ran (the exec hook).
	Executed func(stmt string)
	// Discard has the session close its connection rather than hand it
	// back to the host's pool (ConnDiscarder); nil when it cannot, and a
	// setting it fails to restore then fails the phase.
	Discard func(why error)
}

// ConnDiscarder is a session whose pinned connection a phase's setting
// (ops.GuardSetting) can leave changed: one that failed to restore is
// closed rather than returned to the host's pool (SQLite's session). The
// PostgreSQL session is none: it sets every setting with SET LOCAL, which
// ends with its transaction, and plans no setting guard.
type ConnDiscarder interface {
	Discard(why error)
}

// Config is what a session is opened with: the options of one call that a
// dialect's session reads, as values and the call's own hooks.
type Config struct {
	// LockWait bounds the wait for the cross-replica lock.
	LockWait time.Duration
	// DDLLockTimeout and DDLLockAttempt bound a catalog change's lock
	// (PostgreSQL): the whole wait, and each attempt of it.
	DDLLockTimeout time.Duration
	DDLLockAttempt time.Duration
	// ConcurrentWait bounds a CONCURRENTLY build's wait (PostgreSQL).
	ConcurrentWait time.Duration
	// StmtTimeout, once set (StmtTimeoutSet), is every statement's budget;
	// else each kind has its own.
	StmtTimeout    time.Duration
	StmtTimeoutSet bool
	// CopyBatchPages and CopyPause size and pace a batched copy
	// (PostgreSQL).
	CopyBatchPages int
	CopyPause      float64
	Logger         *slog.Logger
	// Fail is the failpoint hook.
	Fail func(point string) error
	// OverBudget is an error once the online budget is spent.
	OverBudget func() error
}

// MetaRows names the kandev_meta rows a Meta reads, with that read's
// arguments and, per dialect, its text, made once (NewMetaRows).
type MetaRows struct {
	Names            []string
	Args             []any
	sqlite, postgres string
}

// NewMetaRows is the read of the rows named.
func NewMetaRows(names ...string) *MetaRows {
	return &MetaRows{Names: names, Args: Args(names), sqlite: metaQuery(dialect.SQLite, len(names)), postgres: metaQuery(dialect.Postgres, len(names))}
}

// Query is the read's text on dialect d: the key and value of each row
// present.
func (m *MetaRows) Query(d dialect.Dialect) string {
	if d == dialect.Postgres {
		return m.postgres
	}
	return m.sqlite
}

func metaQuery(d dialect.Dialect, n int) string {
	return `SELECT key, value FROM kandev_meta WHERE key IN (` + Placeholders(d, 1, n) + `)`
}

// ScanMeta reads rows of (key, value) into a map.
func ScanMeta(rows *sql.Rows) (map[string]string, error) {
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return nil, err
		}
		out[k] = v
	}
	return out, rows.Err()
}

// Args is names as query arguments.
func Args(names []string) []any {
	out := make([]any, len(names))
	for i, n := range names {
		out[i] = n
	}
	return out
}
