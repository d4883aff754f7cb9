// Package keys reads and writes the three activation keys in the host's
// kandev_meta table and classifies an installation by them (AC-24, AC-24c).
//
// The keys are write-once: every write is INSERT … ON CONFLICT DO NOTHING, so a
// key already present — including a second-precision key from an older build —
// is never rewritten (AC-24 point 5).
package keys

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/schemastate/schemastate/dialect"
)

// The three activation keys (AC-24).
const (
	CaptureSince    = "subagent_context_capture_since"
	BackfillThrough = "subagent_context_backfill_through"
	ExecutionSince  = "subagent_context_execution_since"
)

// MetaTable is the host's key/value table.
const MetaTable = "kandev_meta"

// Set is the three keys as stored; nil means absent.
type Set struct {
	CaptureSince    *string `json:"subagent_context_capture_since"`
	BackfillThrough *string `json:"subagent_context_backfill_through"`
	ExecutionSince  *string `json:"subagent_context_execution_since"`
}

// State is the AC-24c classification of the two consumer-facing keys.
type State string

const (
	Activated     State = "activated"      // capture present, execution present
	CaptureOnly   State = "capture_only"   // capture present, execution absent (AC-24b)
	ExecutionOnly State = "execution_only" // capture absent, execution present
	Inactive      State = "inactive"       // both absent
)

// State classifies s per AC-24c. backfill_through is deliberately not a
// dimension: AC-24d binds it to capture_since.
func (s Set) State() State {
	switch c, e := s.CaptureSince != nil, s.ExecutionSince != nil; {
	case c && e:
		return Activated
	case c:
		return CaptureOnly
	case e:
		return ExecutionOnly
	default:
		return Inactive
	}
}

// BackfillDone reports the AC-24d guard: both backfill keys present.
func (s Set) BackfillDone() bool { return s.CaptureSince != nil && s.BackfillThrough != nil }

// Read returns the three keys as stored.
func Read(ctx context.Context, q dialect.Querier, d dialect.Dialect) (Set, error) {
	rows, err := q.QueryContext(ctx, d.Rebind(`SELECT key, value FROM kandev_meta WHERE key IN (?, ?, ?)`),
		CaptureSince, BackfillThrough, ExecutionSince)
	if err != nil {
		return Set{}, fmt.Errorf("read %s: %w", MetaTable, err)
	}
	defer rows.Close()
	var s Set
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return Set{}, fmt.Errorf("read %s: %w", MetaTable, err)
		}
		switch k {
		case CaptureSince:
			s.CaptureSince = &v
		case BackfillThrough:
			s.BackfillThrough = &v
		case ExecutionSince:
			s.ExecutionSince = &v
		}
	}
	if err := rows.Err(); err != nil {
		return Set{}, fmt.Errorf("read %s: %w", MetaTable, err)
	}
	return s, nil
}

// Get returns one key's value, or ok=false when it is absent.
func Get(ctx context.Context, q dialect.Querier, d dialect.Dialect, key string) (value string, ok bool, err error) {
	err = q.QueryRowContext(ctx, d.Rebind(`SELECT value FROM kandev_meta WHERE key = ?`), key).Scan(&value)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("read %s.%s: %w", MetaTable, key, err)
	}
	return value, true, nil
}

// WriteOnce inserts key=value unless the key is already present, in which case
// the stored value is left byte-identical. It reports whether it wrote.
func WriteOnce(ctx context.Context, q dialect.Querier, d dialect.Dialect, key, value string) (bool, error) {
	res, err := q.ExecContext(ctx, d.Rebind(`INSERT INTO kandev_meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO NOTHING`), key, value)
	if err != nil {
		return false, fmt.Errorf("write %s.%s: %w", MetaTable, key, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("write %s.%s: %w", MetaTable, key, err)
	}
	return n == 1, nil
}
