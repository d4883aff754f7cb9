// Package health answers the writer-health question of AC-28 from the
// database alone: has every subagent message since activation produced a
// task_session_subagents row?
//
// The comparison is two directed anti-joins, never one signed difference
// (AC-28, "Two directions, never netted"): the SHORTFALL — expected keys with
// no row — is the alarm; the EXCESS — rows with no accounting message — is
// reported for attribution and never alarms, and it cannot mask a shortfall
// because it is counted in the other direction. Alongside them: the
// cross-execution collision count (AC-32) and MAX(observed_at) scoped to
// activation (AC-29).
//
// With subagent_context_capture_since absent the comparison is not run at all;
// the missing key is the signal (AC-28a, AC-24c).
package health

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/instant"
	"github.com/schemastate/schemastate/internal/readonly"
	"github.com/schemastate/schemastate/keys"
)

// Verdict is the one-word outcome of an evaluation.
type Verdict string

// Verdicts, in precedence order: the first that applies is reported.
const (
	// NotActivated: subagent_context_capture_since is absent; no comparison
	// was run and every count is null (AC-28a).
	NotActivated Verdict = "not_activated"
	// Shortfall: at least one qualifying subagent message since activation
	// has no row — a stopped or failing writer (AC-28, AC-29).
	Shortfall Verdict = "shortfall"
	// NothingSinceActivation: no row has been observed at or after
	// capture_since. The strongest divergence signal, never healthy (AC-29).
	NothingSinceActivation Verdict = "nothing_since_activation"
	// Healthy: no shortfall and the writer has produced rows since
	// activation. Excess and collisions may be non-zero.
	Healthy Verdict = "healthy"
)

// Report is one evaluation. Its JSON form is what `schemastate health --json`
// prints; a null count means the comparison was not run.
type Report struct {
	// CaptureSince is subagent_context_capture_since as stored, nil when absent.
	CaptureSince *string `json:"capture_since"`
	Verdict      Verdict `json:"verdict"`
	Shortfall    *int64  `json:"shortfall"`
	Excess       *int64  `json:"excess"`
	Collisions   *int64  `json:"collisions"`
	// LastObservedAt is MAX(observed_at) at or after capture_since as a key-form
	// instant (RFC3339, nine fractional digits, UTC); nil when no row was
	// observed since activation, or when the comparison was not run.
	LastObservedAt *string `json:"last_observed_at"`
	// UnreadableCreatedAt is the number of subagent messages, carrying every
	// identity the shortfall side requires, whose created_at is not a time:
	// they cannot be placed before or after capture_since, so neither
	// anti-join counts them, and the backfill derives no row from them
	// either. Only SQLite's untyped text can hold one; null when the
	// comparison was not run.
	UnreadableCreatedAt *int64 `json:"unreadable_created_at"`
	// KeyState is the AC-24c classification of the activation keys.
	KeyState keys.State `json:"-"`
}

// ErrMissingTables is wrapped by Evaluate's error when a table it reads does
// not exist; the message names the tables.
var ErrMissingTables = errors.New("health: missing tables")

// ErrBadKey is wrapped by Evaluate's error when capture_since is present but
// not an instant; the message names the key and the value.
var ErrBadKey = errors.New("health: activation key is not an instant")

// Option configures Evaluate.
type Option func(*options)

type options struct {
	dialect dialect.Dialect
	// between runs inside the read transaction after capture_since is read
	// ("capture_since") and after the counts ("counts"); tests use it to
	// commit writes mid-evaluation.
	between func(statement string)
}

// WithDialect overrides driver-based dialect detection.
func WithDialect(d dialect.Dialect) Option { return func(o *options) { o.dialect = d } }

// Evaluate reads capture_since and, when it is present, computes the
// shortfall, excess, collision and last-observed numbers in one statement.
// The key and the numbers come from one read transaction — REPEATABLE READ
// READ ONLY on PostgreSQL, a deferred read transaction on SQLite (one WAL
// snapshot) — so the four agree with each other and with the boundary they
// were computed against (AC-28b).
func Evaluate(ctx context.Context, db *sql.DB, opts ...Option) (*Report, error) {
	o, err := newOptions(db, opts)
	if err != nil {
		return nil, err
	}
	d := o.dialect
	q, err := dialects.For(d)
	if err != nil {
		return nil, fmt.Errorf("health: %w", err)
	}
	tx, err := readonly.Begin(ctx, db, d)
	if err != nil {
		return nil, fmt.Errorf("health: begin read transaction: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // read-only; nothing to keep

	ks, err := readKeys(ctx, tx, d)
	if err != nil {
		return nil, err
	}
	rep := &Report{CaptureSince: ks.CaptureSince, KeyState: ks.State()}
	if ks.CaptureSince == nil {
		// AC-28a: no boundary, no comparison. The messages table is not read.
		rep.Verdict = NotActivated
		return rep, nil
	}
	if err := compare(ctx, tx, q, o, *ks.CaptureSince, rep); err != nil {
		return nil, err
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("health: end read transaction: %w", err)
	}
	rep.Verdict = verdict(rep)
	return rep, nil
}

// newOptions applies opts and, unless WithDialect named one, detects db's
// dialect from its driver.
func newOptions(db *sql.DB, opts []Option) (*options, error) {
	o := &options{}
	for _, opt := range opts {
		opt(o)
	}
	if o.dialect == "" {
		d, err := dialect.Detect(db)
		if err != nil {
			return nil, err
		}
		o.dialect = d
	}
	return o, nil
}

// readKeys reads the activation keys inside tx, after checking that
// kandev_meta exists.
func readKeys(ctx context.Context, tx *sql.Tx, d dialect.Dialect) (keys.Set, error) {
	// Without kandev_meta nothing can be answered; the error then names
	// every table a store without host tables lacks, not only the first.
	if err := requireTables(ctx, tx, d, keys.MetaTable); err != nil {
		if errors.Is(err, ErrMissingTables) {
			err = requireTables(ctx, tx, d, keys.MetaTable, "task_session_messages", "task_session_subagents")
		}
		return keys.Set{}, err
	}
	ks, err := keys.Read(ctx, tx, d)
	if err != nil {
		return keys.Set{}, fmt.Errorf("health: %w", err)
	}
	return ks, nil
}

// compare runs the comparison against the boundary captureSince inside tx
// and stores its numbers in rep: both anti-joins, the collision count, the
// scoped MAX and the unreadable count.
func compare(ctx context.Context, tx *sql.Tx, q dialectSQL, o *options, captureSince string, rep *Report) error {
	d := o.dialect
	b, err := instant.NewBoundary(captureSince)
	if err != nil {
		return fmt.Errorf("%w: %s = %q: %v", ErrBadKey, keys.CaptureSince, captureSince, err)
	}
	if err := requireTables(ctx, tx, d, "task_session_messages", "task_session_subagents"); err != nil {
		return err
	}

	o.hook("capture_since")

	// One statement, one scan of the messages (see evaluation). Queries
	// keeps the normative statements, which give the same numbers.
	var c counts
	if err := evaluate(ctx, tx, q, d, b.Arg(), &c); err != nil {
		return fmt.Errorf("health: shortfall, excess, collisions and last observed: %w", err)
	}
	o.hook("counts")
	rep.Shortfall, rep.Excess, rep.Collisions, rep.UnreadableCreatedAt = &c.shortfall, &c.excess, &c.collisions, &c.unreadable
	if c.last.Valid {
		v, err := instant.FromColumn(c.last.String)
		if err != nil {
			return fmt.Errorf("health: last observed: %w", err)
		}
		rep.LastObservedAt = &v
	}
	return nil
}

func (o *options) hook(statement string) {
	if o.between != nil {
		o.between(statement)
	}
}

// verdict applies the precedence: shortfall outranks everything (it is the
// alarm), then an empty scoped MAX (AC-29), then healthy. Excess never alarms.
func verdict(r *Report) Verdict {
	switch {
	case r.CaptureSince == nil:
		return NotActivated
	case r.Shortfall != nil && *r.Shortfall > 0:
		return Shortfall
	case r.LastObservedAt == nil:
		return NothingSinceActivation
	default:
		return Healthy
	}
}

// requireTables fails with ErrMissingTables naming every table in names that
// does not exist (resolved the way the statements resolve them: on
// PostgreSQL through search_path).
func requireTables(ctx context.Context, q dialect.Querier, d dialect.Dialect, names ...string) error {
	var missing []string
	for _, n := range names {
		found, err := readonly.TableExists(ctx, q, d, n)
		if err != nil {
			return fmt.Errorf("health: look up table %s: %w", n, err)
		}
		if !found {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: %s", ErrMissingTables, strings.Join(missing, ", "))
	}
	return nil
}
