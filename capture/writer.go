// Package capture is the live write path of the subagent-context store: one
// atomic upsert per observed subagent frame into task_session_subagents, the
// writer's health counters, and the session and turn reads.
//
// Every merge rule lives inside the upsert's conflict clause (AC-14): there is
// no read-then-write, so two frames for one subagent racing each other still
// leave one row whose write-once and monotonic columns hold.
package capture

import (
	otelmetric "go.opentelemetry.io/otel/metric"

	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/catalog"
	"github.com/schemastate/schemastate/internal/contract"
	"github.com/schemastate/schemastate/internal/hooks"
	"github.com/schemastate/schemastate/internal/instant"
	"github.com/schemastate/schemastate/toolstatus"
)

// Table is the table this package writes.
const Table = "task_session_subagents"

// ErrNoIdentity is returned by Record for a frame without a session id, task
// id or tool-call id (AC-2). No row was written.
var ErrNoIdentity = errors.New("capture: frame has no session, task or tool-call id")

// Writer records subagent frames. It is safe for concurrent use.
type Writer struct {
	db       *sql.DB
	d        dialect.Dialect
	logger   *slog.Logger
	now      func() time.Time
	contract *contract.Writer
	upsert   upsert
	retry    RetryPolicy
	counters counterSet

	// stmt is the upsert prepared once and reused: parsing the statement
	// and generating its conflict clause's code is most of a frame's cost
	// on SQLite. database/sql prepares it again on each pool connection it
	// runs on, and SQLite re-prepares it after a schema change.
	// Frames read it without a lock; stmtMu serializes preparing and Close.
	stmtMu sync.Mutex
	stmt   atomic.Pointer[sql.Stmt]
	// unprepared is set once a named statement was lost to a pooler
	// (statementLost): every later frame is sent as a plain statement, as
	// the direct connection's speed cannot be had there.
	unprepared atomic.Bool
	// meters is WithMeterProvider's; metricReg its registration, ended by
	// Close (under stmtMu).
	meters    otelmetric.MeterProvider
	metricReg otelmetric.Registration
}

// Option configures a Writer.
type Option func(*Writer)

// WithLogger sets the logger failed writes are reported on (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(w *Writer) { w.logger = l } }

// WithClock sets the clock for updated_at and for frames without an
// observation time (default time.Now).
func WithClock(now func() time.Time) Option { return func(w *Writer) { w.now = now } }

// NewWriter returns a Writer over db, whose dialect is d, once the live
// table is one it can write every frame to: it reads the table off the
// catalog and judges it against what this release's writer writes
// (writers.json). A table that would reject frames the writer writes — a
// NOT NULL where a frame has no value, a check a value breaks, a foreign key
// the frames' order breaks, no unique key for the conflict target, a
// missing table or column — is refused with an error (ErrIncompatibleTable)
// naming the table, the column or constraint and the frames that would
// fail, and no frame is attempted. What the contract cannot decide (a check
// of another form) is logged at WARN and does not refuse.
func NewWriter(ctx context.Context, db *sql.DB, d dialect.Dialect, opts ...Option) (*Writer, error) {
	w, err := newWriter(ctx, db, d, opts...)
	if err != nil {
		return nil, err
	}
	if hooks.From(ctx).Unchecked {
		return w, nil
	}
	if err := w.Check(ctx); err != nil {
		return nil, errors.Join(err, w.Close())
	}
	return w, nil
}

// newWriter is NewWriter without the table's check.
func newWriter(ctx context.Context, db *sql.DB, d dialect.Dialect, opts ...Option) (*Writer, error) {
	cw, err := writerContract(ctx)
	if err != nil {
		return nil, err
	}
	u, err := upsertFor(cw)
	if err != nil {
		return nil, fmt.Errorf("capture: %s: %w", contract.File, err)
	}
	u.sql = d.Rebind(u.sql)
	w := &Writer{db: db, d: d, logger: slog.Default(), now: time.Now, contract: cw, upsert: u, retry: DefaultRetryPolicy}
	for _, o := range opts {
		o(w)
	}
	if w.meters != nil {
		if err := w.registerMetrics(); err != nil {
			w.logger.Warn("capture: the writer's metrics are not published", "error", err)
		}
	}
	return w, nil
}

// writerContract is this release's "capture" writer, or the one ctx
// carries (internal/hooks: compat writes by another release's contract).
func writerContract(ctx context.Context) (*contract.Writer, error) {
	if cw := hooks.From(ctx).Writer; cw != nil {
		return cw, nil
	}
	c, err := contract.Builtin()
	if err != nil {
		return nil, fmt.Errorf("capture: %w", err)
	}
	cw := c.Writer("capture")
	if cw == nil {
		return nil, fmt.Errorf("capture: %s has no \"capture\" writer", contract.File)
	}
	return cw, nil
}

// Close releases the statement the Writer keeps prepared on the pool's
// connections. A Writer lives as long as its *sql.DB; one that is dropped
// earlier should be closed. A Record after Close prepares the statement again.
func (w *Writer) Close() error {
	merr := w.unregisterMetrics()
	w.stmtMu.Lock()
	defer w.stmtMu.Unlock()
	stmt := w.stmt.Swap(nil)
	if stmt == nil {
		return merr
	}
	return errors.Join(merr, stmt.Close())
}

// prepared returns the prepared upsert, preparing it on first use. It
// returns nil when the statement cannot be prepared now (the table is
// missing, or still in its pre-amendment shape): the frame is then sent as
// a plain statement, which reports that error as it always did, and the
// next frame tries to prepare again. After a pooler lost a named statement
// it returns nil for good.
func (w *Writer) prepared(ctx context.Context) *sql.Stmt {
	if w.unprepared.Load() {
		return nil
	}
	if stmt := w.stmt.Load(); stmt != nil {
		return stmt
	}
	w.stmtMu.Lock()
	defer w.stmtMu.Unlock()
	if stmt := w.stmt.Load(); stmt != nil {
		return stmt
	}
	stmt, err := w.db.PrepareContext(ctx, w.upsert.sql+preparedMark)
	if err != nil {
		if statementLost(err) {
			w.unprepared.Store(true)
		}
		return nil
	}
	w.stmt.Store(stmt)
	return stmt
}

// preparedMark ends the prepared upsert's text, so that it differs from the
// plain one's: pgx runs a statement whose text it has prepared on the
// connection as that named statement, and the plain send that replaces a
// lost statement must not depend on it again.
const preparedMark = "\n-- prepared"

// Counters is a snapshot of this Writer's own counters (the process-wide sum
// is GlobalCounters, published with expvar only when the host asks: see
// ExpvarName).
func (w *Writer) Counters() Counters { return w.counters.snapshot() }

// ErrIncompatibleTable is wrapped by the error of NewWriter and Check when
// the live table would reject frames the writer writes.
var ErrIncompatibleTable = errors.New("capture: the table would reject frames this writer writes")

// Check reads the live table off the catalog and judges it against what
// the writer writes (see NewWriter): nil when every frame can be written.
// It writes nothing and prepares nothing — PostgreSQL resolves a conflict
// target only when it plans the statement, and an INVALID unique index
// (a failed concurrent build) is read for what it is.
func (w *Writer) Check(ctx context.Context) error {
	t, err := catalog.ReadTable(ctx, w.db, w.d, Table)
	if err != nil {
		return fmt.Errorf("capture: read %s off the catalog: %w", Table, err)
	}
	findings := contract.Judge(w.contract, contract.Table{T: t.T, Invalid: t.Invalid})
	var refused []string
	for _, f := range findings {
		if f.Refused {
			refused = append(refused, f.String())
			continue
		}
		w.logger.LogAttrs(ctx, slog.LevelWarn, "capture: the table may reject some frames",
			slog.String("table", f.Table), slog.String("column", f.Column), slog.String("constraint", f.Constraint),
			slog.String("code", f.Code), slog.String("detail", f.Detail))
	}
	if len(refused) > 0 {
		return fmt.Errorf("%w: %s", ErrIncompatibleTable, strings.Join(refused, "; "))
	}
	return nil
}

// Record writes one frame with a single atomic upsert and counts it (AC-26).
//
// Record never panics and never needs handling: telemetry never breaks the
// product path (AC-27). A write that fails is logged at WARN with the session
// and tool-call ids and counted as failed; the returned error repeats that
// outcome for callers that want it (ErrNoIdentity for an AC-2 skip,
// ErrUnstorableText for an identity no dialect can hold exactly, the database
// error for a failed write) and may be ignored. A descriptive field no
// dialect can hold exactly (a NUL, bytes that are not UTF-8) is stored NULL,
// counted (unstorable_text) and logged at WARN naming the field; the frame
// is written with every other field.
//
// A write that fails for a transient reason is sent again under the
// Writer's RetryPolicy (WithRetry): it is counted failed only after its last
// attempt, and Record returns within the policy's Budget (15 s by default).
func (w *Writer) Record(ctx context.Context, f Frame) error { return w.record(ctx, f, 0) }

// record is Record for a frame read from input line line (0: none), which
// the WARN of a failed write names.
func (w *Writer) record(ctx context.Context, f Frame, line int) error {
	// AC-2: identity first, before any metric is looked at, so a skipped frame
	// counts skipped_no_identity and nothing else.
	if f.SessionID == "" || f.TaskID == "" || f.ToolCallID == "" {
		w.count(outcome{skipped: true})
		return ErrNoIdentity
	}
	// The same frame must have the same outcome on both dialects, and no
	// identity may be altered: a NUL or non-UTF-8 identity is refused, never
	// stored on one dialect and lost on the other (see ErrUnstorableText).
	if err := checkIdentity(f); err != nil {
		w.count(outcome{failed: true})
		w.warn(ctx, f, line, "", 0, err)
		return err
	}
	// AC-1: a descriptive field no dialect can hold exactly costs the frame
	// that field, never its row: it is stored NULL, counted and logged.
	f, dropped := dropUnstorable(f)
	for _, d := range dropped {
		w.warnDropped(ctx, f, line, d)
	}
	r := w.row(f)
	// The upsert is idempotent, so sending it again after an attempt whose
	// outcome is unknown (a dropped connection) cannot double anything.
	args := w.upsert.bind(r.args())
	attempts, err := w.retry.do(ctx, func(ctx context.Context) error {
		if stmt := w.prepared(ctx); stmt != nil {
			_, err := stmt.ExecContext(ctx, args...)
			if !statementLost(err) {
				return err
			}
			// Behind a transaction-mode pooler a named statement lives on
			// one server connection and the next frame may run on another:
			// no frame depends on it any more. This one is sent again at
			// once, unprepared (Close still releases the statement).
			w.unprepared.Store(true)
		}
		_, err := w.db.ExecContext(ctx, w.upsert.sql, args...)
		return err
	})
	// AC-9: anomalous_value counts every frame that reached the write.
	// AC-31: unknown_execution counts rows written with the sentinel, so only
	// a write that committed.
	// unstorable_text, like anomalous_value, counts every frame that reached
	// the write carrying what it counts.
	o := outcome{anomalous: r.anomalous, unstorable: len(dropped) > 0, retried: attempts > 1}
	if err != nil {
		o.failed = true
		w.count(o)
		w.warn(ctx, f, line, r.executionID, attempts, err)
		return fmt.Errorf("capture: upsert %s/%s: %w", excerpt(f.SessionID), excerpt(f.ToolCallID), err)
	}
	o.persisted, o.unknown = true, r.unknownExecution
	w.count(o)
	return nil
}

// warn logs a frame that was not written. Values are quoted as excerpts, so
// a huge or binary id cannot flood the log.
func (w *Writer) warn(ctx context.Context, f Frame, line int, executionID string, attempts int, err error) {
	attrs := []slog.Attr{
		slog.String("session_id", logText(f.SessionID)),
		slog.String("tool_call_id", logText(f.ToolCallID)),
	}
	if executionID != "" {
		attrs = append(attrs, slog.String("agent_execution_id", logText(executionID)))
	}
	if line > 0 {
		attrs = append(attrs, slog.Int("line", line))
	}
	if attempts > 0 {
		attrs = append(attrs, slog.Int("attempts", attempts))
	}
	attrs = append(attrs, slog.String("error", clip(err.Error(), maxReason)))
	w.logger.LogAttrs(ctx, slog.LevelWarn, "subagent context write failed", attrs...)
}

// warnDropped logs a descriptive field stored NULL, naming it, why its text
// could not be stored, and a quoted excerpt of that text.
func (w *Writer) warnDropped(ctx context.Context, f Frame, line int, d droppedText) {
	attrs := []slog.Attr{
		slog.String("session_id", logText(f.SessionID)),
		slog.String("tool_call_id", logText(f.ToolCallID)),
		slog.String("field", d.field),
		slog.String("reason", d.why),
		slog.String("value", d.excerpt),
	}
	if line > 0 {
		attrs = append(attrs, slog.Int("line", line))
	}
	w.logger.LogAttrs(ctx, slog.LevelWarn, "subagent context text field stored NULL: it holds text no dialect can store exactly", attrs...)
}

// logText is s as a log attribute: verbatim when short and printable as
// UTF-8 without a NUL, else its quoted excerpt.
func logText(s string) string {
	if len(s) <= excerptLen && goTextProblem(s) == "" {
		return s
	}
	return excerpt(s)
}

func (w *Writer) count(o outcome) {
	w.counters.add(o)
	global.add(o)
}

// row is a frame normalized to column values (spec: Column-level
// normalization rules).
type row struct {
	id, sessionID, taskID, executionID, toolCallID string
	turnID, parentToolCallID, subagentType         any
	description, agentID, childSessionID, model    any
	agentStatus, toolStatus                        any
	isAsync                                        int64
	totalTokens, toolUseCount, durationMs          any
	observedAt, settledAt, updatedAt               any
	anomalous, unknownExecution                    bool
}

func (w *Writer) row(f Frame) row {
	now := w.now()
	observed := f.ObservedAt
	if observed.IsZero() {
		observed = now
	}
	p := f.Subagent
	r := row{
		id:               newID(),
		sessionID:        f.SessionID,
		taskID:           f.TaskID,
		executionID:      f.ExecutionID,
		toolCallID:       f.ToolCallID,
		turnID:           text(f.TurnID),
		parentToolCallID: text(f.ParentToolCallID),
		subagentType:     text(p.SubagentType),
		description:      text(p.Description),
		agentID:          text(p.AgentID),
		childSessionID:   text(p.ChildSessionID),
		model:            text(p.Model),
		agentStatus:      text(p.Status),
		toolStatus:       text(f.ToolStatus),
		observedAt:       instant.RowTime(w.d, observed),
		updatedAt:        instant.RowTime(w.d, now),
	}
	// AC-31: no execution identity → the shared sentinel, still written.
	if r.executionID == "" {
		r.executionID = UnknownExecution
		r.unknownExecution = true
	}
	if p.IsAsync {
		r.isAsync = 1
	}
	// AC-7a: 0 is "not reported" for the two plain int64 metrics.
	// AC-9: a negative metric is not a measurement: NULL, and counted.
	var bad bool
	r.totalTokens, bad = metric(p.TotalTokens, false)
	r.anomalous = r.anomalous || bad
	r.durationMs, bad = metric(p.DurationMs, false)
	r.anomalous = r.anomalous || bad
	// AC-7/AC-8: nil is not reported; a reported 0 is stored 0.
	r.toolUseCount = nil
	if p.ToolUseCount != nil {
		r.toolUseCount, bad = metric(int64(*p.ToolUseCount), true)
		r.anomalous = r.anomalous || bad
	}
	// AC-11: settled_at is this frame's observation time when its ACP tool
	// status is terminal; the conflict clause keeps the first one.
	if toolstatus.IsTerminal(f.ToolStatus) {
		r.settledAt = instant.RowTime(w.d, observed)
	}
	return r
}

func (r row) args() []any {
	return []any{r.id, r.sessionID, r.taskID, r.turnID, r.executionID, r.toolCallID,
		r.parentToolCallID, r.subagentType, r.description, r.agentID, r.childSessionID,
		r.model, r.agentStatus, r.toolStatus, r.isAsync, r.totalTokens, r.toolUseCount,
		r.durationMs, SourceLive, r.observedAt, r.settledAt, r.updatedAt}
}

// text maps the payload's "" (absent) to NULL: an empty string is never
// stored in a nullable TEXT column.
func text(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// metric returns the bind value for a reported metric and whether it was
// anomalous (negative). zeroReported says whether 0 is a measurement.
func metric(v int64, zeroReported bool) (any, bool) {
	switch {
	case v < 0:
		return nil, true
	case v == 0 && !zeroReported:
		return nil, false
	default:
		return v, false
	}
}

// newID is a random (version 4) UUID.
func newID() string { return uuid.NewString() }
