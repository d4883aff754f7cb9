// Package backfill is the guarded, one-time copy of historical subagent
// invocations from task_session_messages into task_session_subagents (spec:
// Backfill, AC-21 … AC-23b), and the two activation keys it publishes
// (AC-24, AC-24d, AC-24f).
//
// Run does, in this order and inside the caller's transaction:
//
//	guard (both keys present → nothing to do)
//	→ one unbounded scan of the source predicate: every key's winner,
//	  into a private temp table
//	→ MAX(created_at) over the winners               (backfill_through)
//	→ INSERT … SELECT every winner … ON CONFLICT DO NOTHING
//	→ sample the clock                               (capture_since)
//	→ write both keys, write-once
//
// Atomicity is the caller's: Run takes a dialect.Querier and never begins,
// commits or rolls back. The reconciler hands it the backfill step's
// transaction (PostgreSQL) or savepoint (SQLite), so a failure anywhere —
// the insert, either key write — leaves neither rows nor keys (AC-24a, AC-24d).
// So is the statement_timeout the scan runs under: on PostgreSQL the
// reconcile's backfill transaction sets its own (SET LOCAL, no bound by
// default: the one scan and the one copy take what the history makes them
// take), so a role's statement_timeout of seconds cannot cancel it on every
// boot.
package backfill

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/hooks"
	"github.com/schemastate/schemastate/internal/instant"
	"github.com/schemastate/schemastate/keys"
)

// Unknown is the shared execution-identity sentinel every backfilled row
// carries (AC-31): historical messages hold no execution id.
const Unknown = "unknown"

// Source is the provenance value of every row Run writes.
const Source = "backfill"

// Result is what one Run did.
type Result struct {
	// Ran is false when the AC-24d guard found both keys present and Run did nothing.
	Ran bool
	// Inserted is the number of rows the INSERT wrote (0 on a replay: AC-22).
	Inserted int64
	// UnreadableCreatedAt is the number of messages that qualify (AC-21,
	// AC-21a) but whose created_at is not a time: no instant to order them
	// by (AC-21b) or to store as observed_at, so no row was derived from
	// them. Only SQLite's untyped text can hold one. FirstUnreadable is the
	// least id among them ("" when there is none).
	UnreadableCreatedAt int64
	FirstUnreadable     string
	// OversizedMetadata is the number of candidate messages (those whose
	// metadata text could name a subagent_task) whose metadata is longer
	// than the longest document Run parses (WithMaxMetadata, default
	// MaxMetadata): it is not parsed, so no row is derived from it, and it
	// is counted here instead, with the least id among them in
	// FirstOversized ("" when there is none).
	OversizedMetadata int64
	FirstOversized    string
	// BackfillThrough is the value computed this run: the newest created_at
	// matching the source predicate, or "" when nothing matched (AC-24f).
	BackfillThrough string
	// CaptureSince is the instant sampled after the INSERT (AC-24 point 4).
	CaptureSince string
	// Keys is the key set as stored when Run returned. A key that was already
	// present keeps its stored value, which may differ from the computed one
	// (write-once, AC-24 point 5).
	Keys keys.Set
}

// Option configures Run.
type Option func(*options)

type options struct {
	failpoint func(string) error
	progress  func(string)
	now       func() time.Time
	maxMeta   int64
}

// MaxMetadata is the longest metadata document, in bytes, that Run parses
// by default: 16 MiB, the longest frame the live path ingests
// (capture.DefaultMaxLine). Parsing a document takes a multiple of its size
// in memory while the scan holds it (on SQLite, in the host's process), so
// one huge document could otherwise exhaust the boot's memory, and again on
// every boot, since the backfill is retried until it commits. A longer
// document is not parsed: its message yields no row and is counted in
// Result.OversizedMetadata.
const MaxMetadata = 16 << 20

// WithMaxMetadata sets the longest metadata document, in bytes, that Run
// parses (default MaxMetadata); n <= 0 keeps the default.
func WithMaxMetadata(n int64) Option {
	return func(o *options) {
		if n > 0 {
			o.maxMeta = n
		}
	}
}

// WithProgress installs fn, called before and after the long statements.
func WithProgress(fn func(msg string)) Option { return func(o *options) { o.progress = fn } }

// WithClock sets the clock capture_since is sampled from (default
// time.Now): a test can tell when the sample was taken, and what it read,
// without sleeping between two readings of the real clock.
func WithClock(now func() time.Time) Option {
	return func(o *options) {
		if now != nil {
			o.now = now
		}
	}
}

func (o *options) fail(point string) error {
	if o.failpoint == nil {
		return nil
	}
	if err := o.failpoint(point); err != nil {
		return fmt.Errorf("failpoint %s: %w", point, err)
	}
	return nil
}

func (o *options) report(msg string) {
	if o.progress != nil {
		o.progress(msg)
	}
}

// newOptions applies opts over the defaults: the real clock, MaxMetadata,
// and the failpoints (internal/hooks) a test passed in ctx.
func newOptions(ctx context.Context, opts []Option) *options {
	o := &options{now: time.Now, maxMeta: MaxMetadata, failpoint: hooks.From(ctx).Failpoint}
	for _, opt := range opts {
		opt(o)
	}
	return o
}

// Run performs the guarded backfill on q, which must be a transaction (or a
// connection inside one) that the caller commits only when Run returns nil.
// task_session_subagents must already be in its amended shape (AC-33c): the
// reconciler calls Run only in a pass that observed that end state.
func Run(ctx context.Context, q dialect.Querier, d dialect.Dialect, opts ...Option) (Result, error) {
	o := newOptions(ctx, opts)
	var res Result

	// AC-24d: the guard is BOTH keys. A partial pair from an older build
	// (capture_since without backfill_through, or the mirror) runs again: the
	// INSERT is a no-op replay and only the missing key is written.
	statementsOf, err := dialects.For(d)
	if err != nil {
		return res, fmt.Errorf("backfill: %w", err)
	}
	ks, err := keys.Read(ctx, q, d)
	if err != nil {
		return res, err
	}
	if ks.BackfillDone() {
		res.Keys = ks
		return res, nil
	}
	res.Ran = true

	stmts := statementsOf(o.maxMeta)
	if err := scanWinners(ctx, q, stmts, o); err != nil {
		return res, err
	}
	if err := res.readMax(ctx, q, stmts, o); err != nil {
		return res, err
	}
	if err := o.fail(hooks.FailpointBackfillMaxTaken); err != nil {
		return res, err
	}

	if err := res.insert(ctx, q, stmts, o); err != nil {
		return res, err
	}

	// AC-24 point 4: capture_since is sampled after the INSERT completed and
	// before the key writes — never at transaction start, which would
	// over-claim coverage by the whole scan.
	res.CaptureSince = instant.Format(o.now())
	if err := res.writeKeys(ctx, q, d, o); err != nil {
		return res, err
	}
	for _, c := range stmts.cleanup {
		if _, err := q.ExecContext(ctx, c); err != nil {
			return res, fmt.Errorf("backfill: cleanup: %w", err)
		}
	}
	if res.Keys, err = keys.Read(ctx, q, d); err != nil {
		return res, err
	}
	return res, nil
}

// scanWinners fills the winners table. AC-23a: one unbounded scan, no
// LIMIT, no batching. It reads every message once, in one statement and so
// over one snapshot, and keeps the winner of each (task_session_id,
// tool_call_id) with every column derived.
func scanWinners(ctx context.Context, q dialect.Querier, stmts statements, o *options) error {
	o.report("computing backfill_through and the rows to copy over task_session_messages")
	scanned, err := fastScan(ctx, q, stmts, o)
	if err != nil || scanned {
		return err
	}
	for _, p := range stmts.prepare {
		if _, err := q.ExecContext(ctx, p); err != nil {
			return fmt.Errorf("backfill: prepare: %w", err)
		}
	}
	if _, err := q.ExecContext(ctx, stmts.winners); err != nil {
		return fmt.Errorf("backfill: scan of the source predicate: %w", err)
	}
	return nil
}

// readMax reads backfill_through and the counts of the messages no row is
// derived from.
//
// AC-24d: the MAX and the INSERT both read the winners, so the MAX is
// evaluated over the INSERT's own snapshot: it names exactly the newest
// message the INSERT covers, and a message committed after the scan is
// in neither. (A MAX re-read from the messages after the INSERT would,
// on PostgreSQL's READ COMMITTED, see a later snapshot and could name a
// message the INSERT never covered.) The newest winner is the newest
// qualifying message: each key's winner is its newest. AC-24 point 1:
// it is the high-water mark of the source predicate, not of what this
// attempt inserted, so a replay that inserts nothing still publishes the
// true value.
func (res *Result) readMax(ctx context.Context, q dialect.Querier, stmts statements, o *options) error {
	var maxCol, firstUnreadable, firstOversized sql.NullString
	if err := q.QueryRowContext(ctx, stmts.max).Scan(&maxCol, &res.UnreadableCreatedAt, &firstUnreadable, &res.OversizedMetadata, &firstOversized); err != nil {
		return fmt.Errorf("backfill: MAX(created_at) over the source predicate: %w", err)
	}
	if maxCol.Valid && maxCol.String != "" {
		v, err := instant.FromColumn(maxCol.String)
		if err != nil {
			return fmt.Errorf("backfill: backfill_through: %w", err)
		}
		res.BackfillThrough = v
	} // AC-24f: else '' — the sentinel, never parsed as an instant.
	res.FirstUnreadable = firstUnreadable.String
	if res.UnreadableCreatedAt > 0 {
		o.report(fmt.Sprintf("%d qualifying messages have a created_at that is not a time (first: %s); no row is derived from them",
			res.UnreadableCreatedAt, res.FirstUnreadable))
	}
	res.FirstOversized = firstOversized.String
	if res.OversizedMetadata > 0 {
		o.report(fmt.Sprintf("%d candidate messages have metadata longer than %d bytes, not parsed (first: %s); no row is derived from them",
			res.OversizedMetadata, o.maxMeta, res.FirstOversized))
	}
	return nil
}

// insert copies every winner into task_session_subagents and counts the
// rows it inserted. AC-23a: one INSERT … SELECT of every winner.
func (res *Result) insert(ctx context.Context, q dialect.Querier, stmts statements, o *options) error {
	o.report("copying subagent invocations from task_session_messages")
	r, err := q.ExecContext(ctx, stmts.insert)
	if err != nil {
		return fmt.Errorf("backfill: INSERT … SELECT: %w", err)
	}
	if res.Inserted, err = r.RowsAffected(); err != nil {
		return fmt.Errorf("backfill: rows inserted: %w", err)
	}
	o.report(fmt.Sprintf("inserted %d rows", res.Inserted))
	return o.fail(hooks.FailpointBackfillInserted)
}

// writeKeys writes backfill_through, then capture_since. Both write-once
// (AC-24 point 5): a key already present, at whatever precision an older
// build wrote it, stays byte-identical.
func (res *Result) writeKeys(ctx context.Context, q dialect.Querier, d dialect.Dialect, o *options) error {
	if _, err := keys.WriteOnce(ctx, q, d, keys.BackfillThrough, res.BackfillThrough); err != nil {
		return err
	}
	if err := o.fail(hooks.FailpointBackfillFirstKeyWritten); err != nil {
		return err
	}
	_, err := keys.WriteOnce(ctx, q, d, keys.CaptureSince, res.CaptureSince)
	return err
}

// fastScan runs the scan with the plain metadata cast (statements.fast), in
// a savepoint. It reports whether the winners table now holds the scan's
// rows. A malformed candidate makes the plain cast raise: the savepoint is
// rolled back, the transaction is as before, and the caller runs the
// guarded scan, whose rows are those the plain cast would have given for
// every well-formed document. The scan is still one statement over one
// snapshot either way; a history with malformed metadata pays for a second
// scan, once.
func fastScan(ctx context.Context, q dialect.Querier, stmts statements, o *options) (bool, error) {
	if stmts.fast == "" {
		return false, nil
	}
	// (prepare's first statement drops a leftover winners table.)
	for _, stmt := range []string{"SAVEPOINT schemastate_backfill_scan", stmts.prepare[0]} {
		if _, err := q.ExecContext(ctx, stmt); err != nil {
			return false, fmt.Errorf("backfill: prepare: %w", err)
		}
	}
	_, scanErr := q.ExecContext(ctx, stmts.fast)
	if scanErr != nil {
		if _, err := q.ExecContext(ctx, "ROLLBACK TO SAVEPOINT schemastate_backfill_scan"); err != nil {
			return false, fmt.Errorf("backfill: scan of the source predicate: %w (and its rollback: %v)", scanErr, err)
		}
		if ctx.Err() != nil {
			return false, fmt.Errorf("backfill: scan of the source predicate: %w", scanErr)
		}
		o.report("a candidate message's metadata is not well-formed JSON: reading every candidate through the guarded cast")
	}
	if _, err := q.ExecContext(ctx, "RELEASE SAVEPOINT schemastate_backfill_scan"); err != nil {
		return false, fmt.Errorf("backfill: scan of the source predicate: %w", err)
	}
	return scanErr == nil, nil
}
