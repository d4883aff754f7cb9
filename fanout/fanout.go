// Package fanout is the consumer's read of the subagent-context store: the
// rows of a session, a task or the whole store in the AC-13 order, each with
// the execution identity AC-25 lets a consumer read from it, and the counts a
// consumer may publish together with the coverage it must disclose beside
// them (AC-25, AC-24b, AC-24c, AC-24f).
//
// It only reads: one read transaction per call (REPEATABLE READ READ ONLY on
// PostgreSQL, a deferred read transaction on SQLite), so the keys, the rows
// and the counts come from one snapshot and agree with each other. A missing
// table or a missing key is a state it reports, not an error.
package fanout

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/schemastate/schemastate/capture"
	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/instant"
	"github.com/schemastate/schemastate/internal/readonly"
	"github.com/schemastate/schemastate/keys"
)

// Identity is what a row's agent_execution_id may be read as (AC-25).
type Identity string

const (
	// Real is a non-sentinel agent_execution_id: a real execution identity,
	// whichever side of execution_since its row falls on (AC-25, revision 4).
	Real Identity = "real"
	// UnrecordedLegacy is 'unknown' on a live row observed before
	// execution_since: a row from before the installation had the execution
	// dimension.
	UnrecordedLegacy Identity = "unrecorded_legacy"
	// UnrecordedLive is 'unknown' on a live row observed at or after
	// execution_since (equality lands after, AC-24 point 3): a frame that
	// arrived without an execution id (AC-31).
	UnrecordedLive Identity = "unrecorded_live"
	// UnrecordedBackfill is 'unknown' on a backfilled row: historical
	// messages carry no execution id (AC-31), whenever the backfill ran.
	UnrecordedBackfill Identity = "unrecorded_backfill"
	// NotAnIdentity is every row while execution_since is absent: no
	// agent_execution_id on the installation may be read as an execution
	// identity (AC-24b).
	NotAnIdentity Identity = "not_an_identity"
)

// Identities lists the classes in the order they are reported.
var Identities = []Identity{Real, UnrecordedLegacy, UnrecordedLive, UnrecordedBackfill, NotAnIdentity}

// The provenance values the two writers store (AC-1, AC-21).
const (
	SourceLive     = capture.SourceLive
	SourceBackfill = "backfill"
)

// ErrBadKey is wrapped by the error of Read and Count when execution_since is
// present but not an instant: no row can be placed before or after it.
var ErrBadKey = errors.New("fanout: activation key is not an instant")

// Scope selects the rows read: a session, a task, both (the session's rows
// of that task), or neither (the whole store).
type Scope struct {
	SessionID string `json:"session_id,omitempty"`
	TaskID    string `json:"task_id,omitempty"`
}

// Row is one stored subagent context with its execution identity.
type Row struct {
	capture.Row
	ExecutionIdentity Identity `json:"execution_identity"`
}

// Result is Read's answer.
type Result struct {
	Rows    []Row   `json:"rows"`
	Summary Summary `json:"summary"`
}

// Summary is what a consumer may publish about the rows of a scope, and what
// it must disclose beside it.
type Summary struct {
	// Rows is the number of rows.
	Rows int64 `json:"rows"`
	// Subagents is the number of distinct (task_session_id, tool_call_id):
	// a backfilled row and a live row of one tool call are one subagent. A
	// tool-call id that two executions reused counts once (health reports
	// those as collisions).
	Subagents int64 `json:"subagents"`
	// Executions is the number of distinct real execution ids — 'unknown'
	// is never counted, since it asserts an execution is unrecorded, never
	// that two rows share one (AC-25). nil while execution_since is absent
	// (AC-24b).
	Executions *int64 `json:"executions"`
	// BySource counts rows per source: live and backfill always, and any
	// other stored value. The split is a required disclosure (AC-25).
	BySource map[string]int64 `json:"by_source"`
	// ByIdentity counts rows per execution identity, every class present.
	// Execution counts compared across execution_since disclose this split
	// (AC-25).
	ByIdentity map[Identity]int64 `json:"by_execution_identity"`
	Coverage   Coverage           `json:"coverage"`
}

// Read returns the rows of scope in the AC-13 order, each classified, and
// their summary. A scope that matches nothing (an unknown session) is an
// empty result, not an error.
func Read(ctx context.Context, db *sql.DB, scope Scope) (*Result, error) {
	res := &Result{Rows: []Row{}}
	err := inSnapshot(ctx, db, func(r *reader) error {
		if !r.cov.TablePresent {
			return nil
		}
		var err error
		if res.Rows, err = r.rows(ctx, scope); err != nil {
			return err
		}
		return r.count(ctx, scope, &res.Summary)
	}, &res.Summary)
	if err != nil {
		return nil, err
	}
	return res, nil
}

// Count returns the summary of scope without its rows: `status`'s counts.
func Count(ctx context.Context, db *sql.DB, scope Scope) (*Summary, error) {
	s := &Summary{}
	err := inSnapshot(ctx, db, func(r *reader) error {
		if !r.cov.TablePresent {
			return nil
		}
		return r.count(ctx, scope, s)
	}, s)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// reader is one read transaction and what it learned about the keys.
type reader struct {
	tx  *sql.Tx
	d   dialect.Dialect
	cov Coverage
	// since is execution_since bound for comparison; nil when absent.
	since *instant.Boundary
	// from is what the statements read rows from: the table, or on a table
	// that predates the amendment the table with the AC-31 sentinel as its
	// agent_execution_id.
	from string
}

// inSnapshot opens the read transaction, reads the tables' presence and the
// keys, runs fn and fills s's zero counts and coverage.
func inSnapshot(ctx context.Context, db *sql.DB, fn func(*reader) error, s *Summary) error {
	d, err := dialect.Detect(db)
	if err != nil {
		return fmt.Errorf("fanout: %w", err)
	}
	tx, err := readonly.Begin(ctx, db, d)
	if err != nil {
		return fmt.Errorf("fanout: begin read transaction: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // read-only; nothing to keep

	r := &reader{tx: tx, d: d}
	if err := r.readKeys(ctx); err != nil {
		return err
	}
	if err := r.readTable(ctx); err != nil {
		return err
	}
	zeroCounts(s, r.since != nil)
	if err := fn(r); err != nil {
		return err
	}
	r.cov.fill(s)
	s.Coverage = r.cov
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("fanout: end read transaction: %w", err)
	}
	return nil
}

// readKeys reads the activation keys when kandev_meta exists, and binds
// execution_since for comparison when it is present.
func (r *reader) readKeys(ctx context.Context) error {
	var err error
	if r.cov.KeysRead, err = tableExists(ctx, r.tx, r.d, keys.MetaTable); err != nil {
		return err
	}
	if r.cov.KeysRead {
		if r.cov.Keys, err = keys.Read(ctx, r.tx, r.d); err != nil {
			return fmt.Errorf("fanout: %w", err)
		}
	}
	if v := r.cov.Keys.ExecutionSince; v != nil {
		b, err := instant.NewBoundary(*v)
		if err != nil {
			return fmt.Errorf("%w: %s = %q: %w", ErrBadKey, keys.ExecutionSince, *v, err)
		}
		r.since = &b
	}
	return nil
}

// readTable learns whether task_session_subagents exists and whether it
// predates the amendment, and sets what the statements read rows from.
func (r *reader) readTable(ctx context.Context) error {
	var err error
	if r.cov.TablePresent, err = tableExists(ctx, r.tx, r.d, capture.Table); err != nil {
		return err
	}
	r.from = capture.Table
	if !r.cov.TablePresent {
		return nil
	}
	has, err := columnExists(ctx, r.tx, r.d, capture.Table, "agent_execution_id")
	if err != nil {
		return err
	}
	if !has {
		// Installed-base state 3 before its first reconcile: status and
		// subagents still read it, every row 'unknown' (AC-31), as the
		// reconcile's added column will hold.
		r.cov.PredatesAmendment = true
		r.from = `(SELECT t.*, ` + lit(capture.UnknownExecution) + ` AS agent_execution_id FROM ` + capture.Table + ` t) AS ` + capture.Table
	}
	return nil
}

// zeroCounts sets s's counts to zero before any is read, so a source or an
// identity with no rows reads 0, not absent. Executions is zeroed only
// withSince (execution_since present); else it stays nil (AC-24b).
func zeroCounts(s *Summary, withSince bool) {
	s.BySource = map[string]int64{SourceLive: 0, SourceBackfill: 0}
	s.ByIdentity = map[Identity]int64{}
	for _, id := range Identities {
		s.ByIdentity[id] = 0
	}
	if withSince {
		zero := int64(0)
		s.Executions = &zero
	}
}
