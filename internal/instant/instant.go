// Package instant is how the module writes and compares the activation keys'
// instants in SQL (AC-24e): the normalized column and parameter forms, the
// boundary a key value is bound as, the key's own text form and the host's
// storage form for a timestamp column, per dialect.
package instant

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/perdialect"
)

// AC-24e: every comparison between a key and a timestamp column is a timestamp
// comparison at microsecond resolution — never a raw string comparison (the
// boundary would snap to midnight) and never julianday (its ULP is ~40 µs).
//
// Both sides are brought to one fixed-width UTC form, "YYYY-MM-DD HH:MM:SS.ffffff":
//   - the key is parsed in Go and rounded UP to the next microsecond, so that for
//     a microsecond-precision column `col >= ceil(key)` is exactly `col >= key`
//     even when the key carries sub-microsecond digits;
//   - on SQLite the column is normalized in SQL: datetime() folds any stored
//     offset into UTC at second precision and the fraction digits are carried
//     over verbatim, padded to six (offsets are whole minutes, so the fraction
//     never changes);
//   - on PostgreSQL the column is a native timestamp (UTC wall clock) and the key
//     is bound as CAST(… AS timestamp) from the UTC string, so the session's
//     TimeZone setting plays no part.

// ErrEmptySentinel is returned when an empty key value is parsed as an instant.
// The empty backfill_through is a sentinel, never a timestamp (AC-24f).
var ErrEmptySentinel = errors.New("keys: empty key value is a sentinel, not an instant")

// microLayout is the normalized comparison form.
const microLayout = "2006-01-02 15:04:05.000000"

// Parse reads a key value (RFC3339 at any precision).
func Parse(value string) (time.Time, error) {
	if value == "" {
		return time.Time{}, ErrEmptySentinel
	}
	t, err := time.Parse(time.RFC3339Nano, value)
	if err != nil {
		return time.Time{}, fmt.Errorf("keys: %q is not an RFC3339 instant: %w", value, err)
	}
	return t.UTC(), nil
}

// Boundary is a parsed key ready to be bound against a timestamp column.
type Boundary struct{ t time.Time }

// NewBoundary parses a key value into a comparison boundary.
func NewBoundary(value string) (Boundary, error) {
	t, err := Parse(value)
	if err != nil {
		return Boundary{}, err
	}
	return Boundary{t: t}, nil
}

// Arg is the bind value for the boundary: the key rounded up to the
// microsecond, in the normalized UTC form.
func (b Boundary) Arg() string {
	t := b.t
	if tr := t.Truncate(time.Microsecond); !tr.Equal(t) {
		t = tr.Add(time.Microsecond)
	}
	return t.Format(microLayout)
}

// Time is the instant the key names.
func (b Boundary) Time() time.Time { return b.t }

// ColumnExpr renders a timestamp column in the normalized comparison form,
// NULL when the stored value is not a time.
//
// On SQLite only text that starts with a calendar date (YYYY-MM-DD) is read
// as a time. datetime() alone would also read 'now' (the moment of reading:
// a different instant at every read), a bare number (a Julian day) and a
// bare time of day (a time on 2000-01-01) — none of them an instant the host
// stored, and none of them a value a PostgreSQL timestamp column can hold
// (its input refuses the last two and resolves 'now' once, on insert).
//
// Like every function here that takes a dialect, it panics on a dialect
// other than the two (dialect.Detect never returns one).
func ColumnExpr(d dialect.Dialect, col string) string { return instants.Must(d).column(col) }

// ParamExpr renders a bound boundary parameter on the column's side of the type system.
func ParamExpr(d dialect.Dialect, param string) string { return instants.Must(d).param(param) }

// AtOrAfter renders "col is at or after the boundary bound at param" (AC-24 point 3:
// equality lands on the after side).
func AtOrAfter(d dialect.Dialect, col, param string) string {
	return ColumnExpr(d, col) + " >= " + ParamExpr(d, param)
}

// Before renders "col is strictly before the boundary bound at param".
func Before(d dialect.Dialect, col, param string) string {
	return ColumnExpr(d, col) + " < " + ParamExpr(d, param)
}

// FromColumn converts a value produced by ColumnExpr (SQLite) or a scanned
// PostgreSQL timestamp rendered by MaxExpr into a key value.
func FromColumn(normalized string) (string, error) {
	s := strings.TrimSpace(normalized)
	t, err := time.ParseInLocation(microLayout, s, time.UTC)
	if err != nil {
		return "", fmt.Errorf("keys: timestamp %q is not in the normalized form: %w", normalized, err)
	}
	return Format(t), nil
}

// MaxExpr renders MAX(col) in the normalized text form, so the result can be
// turned into a key value with FromColumn on either dialect.
func MaxExpr(d dialect.Dialect, col string) string { return instants.Must(d).max(col) }

// rowLayout is the host's storage form for TIMESTAMP columns on SQLite
// (host-context.md): space separator, fraction trimmed, numeric offset.
const rowLayout = "2006-01-02 15:04:05.999999999-07:00"

// RowTime is the value to bind when this module writes a timestamp column: on
// SQLite the host's exact text form, on PostgreSQL a UTC time.Time (the
// column is timestamp without time zone holding UTC wall clock). Both are
// truncated to the column's microsecond precision.
func RowTime(d dialect.Dialect, t time.Time) any {
	return instants.Must(d).row(t.UTC().Truncate(time.Microsecond))
}

// instantSQL is how one dialect writes the normalized timestamp form
// (instant_<dialect>.go).
type instantSQL interface {
	// column is ColumnExpr, param ParamExpr, max MaxExpr.
	column(col string) string
	param(p string) string
	max(col string) string
	// row is RowTime's bound value of t, already UTC and truncated.
	row(t time.Time) any
}

var instants = perdialect.Of[instantSQL]{Postgres: postgresInstant{}, SQLite: sqliteInstant{}}

// keyLayout is RFC3339 with a fixed nine-digit fraction: nanosecond precision
// (AC-24 point 3) that never collapses to the second-precision form on a whole
// second, as time.RFC3339Nano would.
const keyLayout = "2006-01-02T15:04:05.000000000Z07:00"

// Format renders an instant as a key value: UTC, RFC3339, nine fractional digits.
func Format(t time.Time) string { return t.UTC().Format(keyLayout) }
