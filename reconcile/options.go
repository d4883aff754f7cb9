package reconcile

import (
	"context"

	"go.opentelemetry.io/otel/metric"

	"go.opentelemetry.io/otel/trace"

	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/declare"
	"github.com/schemastate/schemastate/internal/hooks"
	"github.com/schemastate/schemastate/internal/ops"
	"github.com/schemastate/schemastate/reconcile/internal/core"
)

// Option configures Reconcile, Plan and Observe.
type Option func(*options)

type options struct {
	dialect    dialect.Dialect
	schemaFile string
	// declSrc, when set (WithDeclaration), is the declaration itself,
	// cited as declName.
	declSrc        []byte
	declName       string
	logger         *slog.Logger
	lockWait       time.Duration
	ddlLockTimeout time.Duration
	ddlLockAttempt time.Duration
	concurrentWait time.Duration
	// stmtTimeout, once set (stmtTimeoutSet), is WithStatementTimeout's
	// budget for every statement; else each kind has its own (stmtBudgets).
	stmtTimeout    time.Duration
	stmtTimeoutSet bool
	onlineAbove    int64
	copyBatchPages int
	copyPause      float64
	onlineBudget   time.Duration
	failpoint      func(string) error
	progress       func(Progress)
	prune          bool
	// allowWriterBreak (WithAllowWriterBreak) applies a declaration this
	// release's writers cannot write every frame to.
	allowWriterBreak bool
	execHook         func(string)
	now              func() time.Time
	observers        []observer
	// tracer is WithTracerProvider's (nil: nothing is traced); meters
	// WithMeterProvider's (nil: nothing is counted).
	tracer trace.Tracer
	meters metric.MeterProvider
}

// call is one Reconcile's options with its runtime state beside them, which
// no option sets: when it began and the lock its events are told under.
type call struct {
	*options
	// started is when Reconcile began, which the online budget counts from.
	started time.Time
	// mu serializes every event (notify): an observer is never called
	// concurrently, though a step and its progress watcher both report.
	mu sync.Mutex
}

func newCall(o *options) *call { return &call{options: o, started: time.Now()} }

// Progress is reported while a long step runs.
type Progress struct {
	Step    string
	Message string
	Elapsed time.Duration
	// Done marks the last report of a step.
	Done bool
}

// WithDialect overrides driver-based dialect detection.
func WithDialect(d dialect.Dialect) Option { return func(o *options) { o.dialect = d } }

// WithSchemaFile reads the declared shape from path instead of the built-in
// schema.hcl. It replaces a WithDeclaration given before it.
func WithSchemaFile(path string) Option {
	return func(o *options) { o.schemaFile, o.declSrc, o.declName = path, nil, "" }
}

// WithDeclaration takes the declared shape from src, HCL as schema.hcl
// spells it, instead of the built-in schema.hcl or a file; name cites it in
// errors (a file name, say). It replaces a WithSchemaFile given before it.
// An empty src is an invalid option.
func WithDeclaration(src []byte, name string) Option {
	return func(o *options) {
		if name == "" {
			name = "declaration (WithDeclaration)"
		}
		o.schemaFile, o.declSrc, o.declName = "", append([]byte{}, src...), name
	}
}

// WithAllowWriterBreak lets the shape step apply a declaration that this
// release's own writers (writers.json) could not write every row to — a NOT
// NULL where a frame has no value, a lost conflict target, a check or key
// their rows break. Without it the shape step fails on such a declaration,
// naming each break, applies nothing, and is retried next boot.
func WithAllowWriterBreak() Option { return func(o *options) { o.allowWriterBreak = true } }

// WithLogger sets the structured logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithLockWait bounds how long a reconcile waits for another replica's lock (default 60s).
func WithLockWait(d time.Duration) Option { return func(o *options) { o.lockWait = d } }

// withDDLLockTimeout is the budget a PostgreSQL DDL statement has to get its
// table lock, over all its attempts (default 5s). When it is spent the step
// fails, naming the sessions holding the table, and is retried next boot.
func withDDLLockTimeout(d time.Duration) Option { return func(o *options) { o.ddlLockTimeout = d } }

// withDDLLockAttempt is the lock_timeout of one attempt of a PostgreSQL DDL
// statement that takes an exclusive lock (default 50ms): the longest the
// statement can sit in the lock queue in front of the host's readers.
func withDDLLockAttempt(d time.Duration) Option { return func(o *options) { o.ddlLockAttempt = d } }

// withConcurrentWait bounds how long a PostgreSQL CREATE or DROP INDEX
// CONCURRENTLY waits for its lock and for the transactions it must outlast —
// any transaction of the database older than the build (default 30s). Its
// lock never blocks the host's readers or writers, so it may wait longer than
// an exclusive one; past the bound the phase fails, naming the oldest
// transaction, removes the INVALID index it left, and is retried next boot.
func withConcurrentWait(d time.Duration) Option { return func(o *options) { o.concurrentWait = d } }

// WithStatementTimeout sets the statement_timeout of every transaction a
// PostgreSQL reconcile opens to d (0: no bound), in place of the budget
// each kind of work has by default (docs/reconcile.md: a minute for a
// transaction of catalog changes, five for one batch of a copy, none for a
// scan, an index build or the backfill). Each transaction sets it for
// itself (SET LOCAL), whatever the host's role, database or connection
// carries. A statement outside a transaction (CREATE INDEX CONCURRENTLY)
// runs under the session's setting instead: when that is shorter than d
// (any setting, when d is 0), the reconcile lifts it to d on its own
// connection when that reaches the server directly, and behind a pooler
// refuses the step before its first statement, naming the setting; a host
// that accepts its setting as the bound passes it (or less) here.
func WithStatementTimeout(d time.Duration) Option {
	return func(o *options) { o.stmtTimeout, o.stmtTimeoutSet = d, true }
}

// WithOnlineAbove sets the live table size (pg_table_size, bytes) from which
// a PostgreSQL table is changed in online phases rather than in one
// transaction (default 256 KiB, where the single transaction's lock already nears 100 ms on a busy two-core machine; 0 takes the online phases for every table).
func WithOnlineAbove(bytes int64) Option { return func(o *options) { o.onlineAbove = bytes } }

// withCopyPause sets how long the online widening's column copy (the path a
// table the rebuild cannot carry takes) rests after each batch, as a
// multiple of the time the batch took (default 1: the copy works at most
// half the time, leaving the disk and CPU to the host's own queries between
// batches; 0 copies flat out). The rebuild's copy does not rest: it takes no
// row lock a host writer could wait on, and resting only lengthens the
// window in which every write is logged twice.
func withCopyPause(ratio float64) Option { return func(o *options) { o.copyPause = ratio } }

// withCopyBatchPages sets how many heap pages one batch of the online
// widening's copy (the rebuild's or the column copy's) covers (default 256,
// about 2 MB).
func withCopyBatchPages(n int) Option { return func(o *options) { o.copyBatchPages = n } }

// WithOnlineBudget bounds how long a Reconcile spends on PostgreSQL's online
// widening (default 0: no bound; the CLI never sets one). Counted from the
// start of Reconcile, it is checked between the copy's and the replay's
// batches and before each later phase: once spent, Reconcile returns with the
// widen step InProgress and the upgrade resumable from the catalog — the next
// boot, or a Reconcile the host runs in its own goroutine, finishes it. The
// key change, execution_since and the backfill are not bounded: they run
// before the widening finishes, as AC-33c orders them.
func WithOnlineBudget(d time.Duration) Option { return func(o *options) { o.onlineBudget = d } }

// withFailpoint installs fn, called at each named failpoint
// (internal/hooks; an eventFailpoint, as withObserver sees it). The test
// hooks (withFailpoint, withExecHook, withClock, withObserver) and the
// online phases' tuning (withDDLLockAttempt, withConcurrentWait,
// withCopyPause, withCopyBatchPages) are no part of the public API: the
// package's own tests reach them through export_test.go, other tests
// through internal/hooks.
func withFailpoint(fn func(point string) error) Option { return func(o *options) { o.failpoint = fn } }

// WithProgress installs fn, called as long steps progress: from the step
// itself and, every 250ms while a step runs, from a watcher repeating what the
// step is doing with its elapsed time. fn is never called concurrently (the
// calls are serialized), so it needs no locking of its own; a slow fn delays
// the step that reports through it. It is never called after Reconcile
// returns.
func WithProgress(fn func(Progress)) Option { return func(o *options) { o.progress = fn } }

// withExecHook installs fn, called (as an eventExecuted, withObserver) with
// each statement of a plan phase
// right after the database executed it, so a caller can hold what a
// reconcile ran against the plan that printed it (Phase.SQL). A statement of
// a PostgreSQL transaction that was retried for its lock is reported once,
// from the attempt that committed; a widen_copy phase's batch statement is
// reported once, however many batches ran; a rebuild_index phase's builds,
// which run two at a time, are reported in the plan's order once they ran.
// A transactional phase's
// statements are reported once the transaction scope that ran them succeeded
// (apply.go); SQLite commits every step at the end of the reconcile, so a
// statement reported there is still undone if that commit fails.
func withExecHook(fn func(stmt string)) Option { return func(o *options) { o.execHook = fn } }

// withClock sets the clock the activation keys are sampled from (default
// time.Now): execution_since when the end state was observed (AC-33b) and
// capture_since after the backfill's INSERT (AC-24 point 4), so a test can
// tell when each sample was taken, and what it read, without sleeping
// between two readings of the real clock. A nil clock is an invalid option.
func withClock(now func() time.Time) Option {
	return func(o *options) { o.now = now }
}

// eventKind says what an event reports.
type eventKind string

const (
	// eventProgress: a long step progresses (event.Progress; WithProgress).
	eventProgress eventKind = "progress"
	// eventExecuted: the database executed a statement of a plan phase
	// (event.Statement; withExecHook).
	eventExecuted eventKind = "executed"
	// eventFailpoint: the reconcile reached a named failpoint (event.Point;
	// withFailpoint). An observer that returns an error there fails the step
	// exactly as a database error would.
	eventFailpoint eventKind = "failpoint"
)

// event is one thing a reconcile reports while it runs.
type event struct {
	Kind      eventKind
	Progress  Progress // eventProgress
	Statement string   // eventExecuted
	Point     string   // eventFailpoint
}

// observer is told every event of a reconcile, in order. It is never called
// concurrently — every event of one reconcile, from the step or from its
// progress watcher, goes through one lock — and never after Reconcile
// returns; a slow observer delays the step. Its error is used at a
// failpoint only.
type observer func(event) error

// withObserver adds fn to the observers of the reconcile's events. Several
// may be added; WithProgress, withExecHook and withFailpoint are observers
// of one kind of event each (the last of each kind given is the one kept).
func withObserver(fn observer) Option {
	return func(o *options) { o.observers = append(o.observers, fn) }
}

// notify tells the observers e, serialized; at a failpoint it returns the
// first error one of them returned.
func (o *call) notify(e event) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	var err error
	switch {
	case e.Kind == eventProgress && o.progress != nil:
		o.progress(e.Progress)
	case e.Kind == eventExecuted && o.execHook != nil:
		o.execHook(e.Statement)
	case e.Kind == eventFailpoint && o.failpoint != nil:
		err = o.failpoint(e.Point)
	}
	for _, fn := range o.observers {
		if ferr := fn(e); ferr != nil && err == nil && e.Kind == eventFailpoint {
			err = ferr
		}
	}
	return err
}

// observed reports whether any observer sees progress, so a step's watcher
// is worth running.
func (o *options) observed() bool { return o.progress != nil || len(o.observers) > 0 }

func (o *call) executed(stmt string) { _ = o.notify(event{Kind: eventExecuted, Statement: stmt}) }

func (o *call) fail(point string) error {
	return o.notify(event{Kind: eventFailpoint, Point: point})
}

// declaration returns the declared shape's HCL source and the name to cite
// it by (WithDeclaration, WithSchemaFile, or the built-in schema.hcl).
func (o *options) declaration() ([]byte, string, error) {
	if o.declSrc != nil {
		return o.declSrc, o.declName, nil
	}
	return declare.Read(o.schemaFile)
}

// loadDeclaration evaluates the declared shape for drv's dialect.
func (o *options) loadDeclaration(drv core.Driver, schemaName string) (*declare.Declaration, error) {
	src, file, err := o.declaration()
	if err != nil {
		return nil, err
	}
	return declare.Eval(src, file, drv.Dialect(), schemaName)
}

// newOptions applies opts, validates them and chooses the dialect's driver,
// once.
func newOptions(ctx context.Context, db *sql.DB, opts []Option) (*options, core.Driver, error) {
	o := &options{logger: slog.Default(), lockWait: 60 * time.Second, ddlLockTimeout: 5 * time.Second,
		ddlLockAttempt: 50 * time.Millisecond, concurrentWait: 30 * time.Second, onlineAbove: 256 << 10, copyBatchPages: 256, copyPause: 1,
		now: time.Now}
	o.hooked(hooks.From(ctx))
	for _, opt := range opts {
		opt(o)
	}
	if err := o.validate(); err != nil {
		return nil, nil, err
	}
	if o.dialect == "" {
		d, err := dialect.Detect(db)
		if err != nil {
			return nil, nil, err
		}
		o.dialect = d
	}
	drv, err := driverFor(o.dialect)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: WithDialect(%q): %w", ErrInvalidOption, o.dialect, err)
	}
	return o, drv, nil
}

// hooked installs the test hooks a context carries (internal/hooks), before
// the options, which may replace them.
func (o *options) hooked(h hooks.Hooks) {
	if h.Failpoint != nil {
		o.failpoint = h.Failpoint
	}
	if h.Executed != nil {
		o.execHook = h.Executed
	}
	if h.Now != nil {
		o.now = h.Now
	}
}

// validate names every option whose value cannot be used, rather than
// clamping it where it is used (a zero DDL lock budget would be no
// lock_timeout at all).
// An unexported option is named as the package's tests call it (export_test.go).
func (o *options) validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidOption}, args...)...))
	}
	if o.logger == nil {
		bad("WithLogger(nil): a logger is required (slog.New(slog.DiscardHandler) logs nothing)")
	}
	if o.declSrc != nil && len(o.declSrc) == 0 {
		bad("WithDeclaration(%q): the declaration is empty", o.declName)
	}
	if o.now == nil {
		bad("WithClock(nil): a clock is required (time.Now is the default)")
	}
	if o.lockWait < 0 {
		bad("WithLockWait(%s): must not be negative", o.lockWait)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"WithDDLLockTimeout", o.ddlLockTimeout}, {"WithDDLLockAttempt", o.ddlLockAttempt}, {"WithConcurrentWait", o.concurrentWait}} {
		if d.v <= 0 {
			bad("%s(%s): must be positive", d.name, d.v)
		}
	}
	if o.stmtTimeout < 0 {
		bad("WithStatementTimeout(%s): must not be negative (0: no bound)", o.stmtTimeout)
	}
	if o.onlineAbove < 0 {
		bad("WithOnlineAbove(%d): must not be negative", o.onlineAbove)
	}
	if o.copyPause < 0 || math.IsNaN(o.copyPause) || math.IsInf(o.copyPause, 0) {
		bad("WithCopyPause(%v): must be a finite ratio, 0 or more", o.copyPause)
	}
	if o.onlineBudget < 0 {
		bad("WithOnlineBudget(%s): must not be negative (0: no bound)", o.onlineBudget)
	}
	if o.copyBatchPages < 1 {
		bad("WithCopyBatchPages(%d): must be at least 1", o.copyBatchPages)
	}
	return errors.Join(errs...)
}

// overBudget is ErrBudgetSpent once the online budget (WithOnlineBudget) is
// spent.
func (o *call) overBudget() error {
	if o.onlineBudget > 0 && time.Since(o.started) >= o.onlineBudget {
		return fmt.Errorf("%w (%s)", ops.ErrBudgetSpent, o.onlineBudget)
	}
	return nil
}

// config is what the dialect's session is opened with.
func (o *call) config() *core.Config {
	return &core.Config{
		LockWait: o.lockWait, DDLLockTimeout: o.ddlLockTimeout, DDLLockAttempt: o.ddlLockAttempt,
		ConcurrentWait: o.concurrentWait, StmtTimeout: o.stmtTimeout, StmtTimeoutSet: o.stmtTimeoutSet,
		CopyBatchPages: o.copyBatchPages, CopyPause: o.copyPause,
		Logger: o.logger, Fail: o.fail, OverBudget: o.overBudget,
	}
}
