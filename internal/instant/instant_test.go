package instant_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/instant"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
)

var ctx = context.Background()

// The AC-24e comparison is exercised against a scratch table with one
// TIMESTAMP column, declared like the host's (timestamp without time zone on
// PostgreSQL, text in the host's storage form on SQLite).

var keyInstant = time.Date(2026, 7, 30, 1, 39, 37, 271235000, time.UTC)

func stamps(t *testing.T, q dialect.Querier) {
	t.Helper()
	_, err := q.ExecContext(ctx, `CREATE TABLE stamps (id TEXT PRIMARY KEY, ts TIMESTAMP NOT NULL)`)
	require.NoError(t, err)
}

func stamp(t *testing.T, q dialect.Querier, d dialect.Dialect, id string, v any) {
	t.Helper()
	_, err := q.ExecContext(ctx, d.Rebind(`INSERT INTO stamps (id, ts) VALUES (?, ?)`), id, v)
	require.NoError(t, err)
}

// classify reports whether row id is at or after key, asserting that
// AtOrAfter and Before are exact complements.
func classify(t *testing.T, q dialect.Querier, d dialect.Dialect, key, id string) bool {
	t.Helper()
	b, err := instant.NewBoundary(key)
	require.NoError(t, err)
	var after, before bool
	require.NoError(t, q.QueryRowContext(ctx, d.Rebind(fmt.Sprintf(
		`SELECT CASE WHEN %s THEN 1 ELSE 0 END, CASE WHEN %s THEN 1 ELSE 0 END FROM stamps WHERE id = ?`,
		instant.AtOrAfter(d, "ts", "?"), instant.Before(d, "ts", "?"))), b.Arg(), b.Arg(), id).Scan(&after, &before))
	require.NotEqual(t, after, before, "%s: at-or-after and before must be complements", id)
	return after
}

// AC-24e, the discriminating test: rows exactly one microsecond before and
// exactly at the key classify before and at-or-after (equality lands on the
// after side). julianday (ULP ≈ 40 µs) cannot pass this.
func TestInstant_AC24e_OneMicrosecondBoundary(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		stamps(t, db.DB)
		key := instant.Format(keyInstant)
		stamp(t, db.DB, db.Dialect, "minus1us", instant.RowTime(db.Dialect, keyInstant.Add(-time.Microsecond)))
		stamp(t, db.DB, db.Dialect, "at", instant.RowTime(db.Dialect, keyInstant))
		stamp(t, db.DB, db.Dialect, "plus1us", instant.RowTime(db.Dialect, keyInstant.Add(time.Microsecond)))
		require.False(t, classify(t, db.DB, db.Dialect, key, "minus1us"))
		require.True(t, classify(t, db.DB, db.Dialect, key, "at"))
		require.True(t, classify(t, db.DB, db.Dialect, key, "plus1us"))

		// A key with sub-microsecond digits never equals a column value: the
		// row at its microsecond is before it, the next microsecond after.
		sub := instant.Format(keyInstant.Add(500 * time.Nanosecond))
		require.False(t, classify(t, db.DB, db.Dialect, sub, "at"))
		require.True(t, classify(t, db.DB, db.Dialect, sub, "plus1us"))
	})
}

// AC-24e, the same-calendar-day test: the live defect compared the key as
// text and snapped the boundary to midnight. Also with a second-precision key
// of the pre-amendment build (AC-24 point 5).
func TestInstant_AC24e_SameCalendarDay(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		stamps(t, db.DB)
		day := func(h, m, s, us int) time.Time { return time.Date(2026, 7, 30, h, m, s, us*1000, time.UTC) }
		stamp(t, db.DB, db.Dialect, "late same day", instant.RowTime(db.Dialect, day(23, 59, 59, 999999)))
		stamp(t, db.DB, db.Dialect, "same instant", instant.RowTime(db.Dialect, keyInstant))
		stamp(t, db.DB, db.Dialect, "early same day", instant.RowTime(db.Dialect, day(0, 0, 0, 0)))
		stamp(t, db.DB, db.Dialect, "same second, later", instant.RowTime(db.Dialect, day(1, 39, 37, 500000)))
		stamp(t, db.DB, db.Dialect, "previous day", instant.RowTime(db.Dialect, day(0, 0, 0, 0).Add(-time.Microsecond)))

		for key, want := range map[string]map[string]bool{
			instant.Format(keyInstant): {"late same day": true, "same instant": true, "early same day": false, "same second, later": true, "previous day": false},
			"2026-07-30T01:39:37Z":     {"late same day": true, "same instant": true, "early same day": false, "same second, later": true, "previous day": false},
			"2026-07-30T00:00:00Z":     {"late same day": true, "same instant": true, "early same day": true, "same second, later": true, "previous day": false},
		} {
			for id, after := range want {
				require.Equal(t, after, classify(t, db.DB, db.Dialect, key, id), "key %s, row %s", key, id)
			}
		}
	})
}

// AC-24e: stored values in any offset and with trimmed fractions compare as
// the instants they are. On SQLite the text is stored as given; on PostgreSQL
// (timestamp holding UTC wall clock) the same instant is written through
// RowTime from a time in that offset.
func TestInstant_AC24e_OffsetsAndTrimmedFractions(t *testing.T) {
	plus2 := time.FixedZone("+02:00", 2*3600)
	minus5 := time.FixedZone("-05:00", -5*3600)
	cases := []struct {
		id     string
		sqlite string
		tm     time.Time
		after  bool
	}{
		{"+02:00 at", "2026-07-30 03:39:37.271235+02:00", keyInstant.In(plus2), true},
		{"+02:00 minus 1us", "2026-07-30 03:39:37.271234+02:00", keyInstant.Add(-time.Microsecond).In(plus2), false},
		{"-05:00 at, previous local day", "2026-07-29 20:39:37.271235-05:00", keyInstant.In(minus5), true},
		{"-05:00 minus 1us", "2026-07-29 20:39:37.271234-05:00", keyInstant.Add(-time.Microsecond).In(minus5), false},
		{"trimmed fraction before", "2026-07-30 01:39:37.27+00:00", keyInstant.Truncate(10 * time.Millisecond), false},
		{"trimmed fraction after", "2026-07-30 01:39:37.3+00:00", keyInstant.Truncate(100 * time.Millisecond).Add(100 * time.Millisecond), true},
		{"whole second after", "2026-07-30 01:39:38+00:00", keyInstant.Truncate(time.Second).Add(time.Second), true},
		{"whole second before", "2026-07-30 01:39:37+00:00", keyInstant.Truncate(time.Second), false},
		{"nanosecond digits truncated", "2026-07-30 01:39:37.271234999+00:00", keyInstant.Add(-time.Nanosecond), false},
		{"T and Z", "2026-07-30T01:39:37.271235Z", keyInstant, true},
	}
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		stamps(t, db.DB)
		for _, c := range cases {
			var v any = c.sqlite
			if db.Dialect == dialect.Postgres {
				v = instant.RowTime(db.Dialect, c.tm)
			}
			stamp(t, db.DB, db.Dialect, c.id, v)
		}
		for _, c := range cases {
			require.Equal(t, c.after, classify(t, db.DB, db.Dialect, instant.Format(keyInstant), c.id), c.id)
		}
		// MAX across mixed offsets is the latest instant, not the greatest text.
		var max sql.NullString
		require.NoError(t, db.DB.QueryRow(`SELECT `+instant.MaxExpr(db.Dialect, "ts")+` FROM stamps`).Scan(&max))
		v, err := instant.FromColumn(max.String)
		require.NoError(t, err)
		require.Equal(t, "2026-07-30T01:39:38.000000000Z", v)
	})
}

// RowTime writes the host's storage form: SQLite text
// "2006-01-02 15:04:05.999999999-07:00" in UTC, truncated to the microsecond.
func TestInstant_RowTimeIsTheHostStorageForm(t *testing.T) {
	plus2 := time.FixedZone("+02:00", 2*3600)
	require.Equal(t, "2026-07-30 01:39:37.271235+00:00", instant.RowTime(dialect.SQLite, keyInstant.Add(999*time.Nanosecond).In(plus2)))
	require.Equal(t, "2026-07-30 01:39:37.2+00:00", instant.RowTime(dialect.SQLite, keyInstant.Truncate(100*time.Millisecond)))
	require.Equal(t, "2026-07-30 01:39:37+00:00", instant.RowTime(dialect.SQLite, keyInstant.Truncate(time.Second)))
	pg := instant.RowTime(dialect.Postgres, keyInstant.Add(999*time.Nanosecond).In(plus2)).(time.Time)
	require.Equal(t, time.UTC, pg.Location())
	require.True(t, pg.Equal(keyInstant))

	b, err := instant.NewBoundary(instant.Format(keyInstant.Add(time.Nanosecond)))
	require.NoError(t, err)
	require.Equal(t, "2026-07-30 01:39:37.271236", b.Arg(), "rounded UP to the microsecond")
	b, err = instant.NewBoundary(instant.Format(keyInstant))
	require.NoError(t, err)
	require.Equal(t, "2026-07-30 01:39:37.271235", b.Arg())
}

// AC-24e on PostgreSQL: the session TimeZone plays no part — writing through
// RowTime, comparing against a bound key, and MAX → key value all give the
// same answers under Pacific/Chatham (+12:45/+13:45) as under UTC.
func TestInstant_AC24e_PostgresSessionTimeZoneChangesNothing(t *testing.T) {
	db := dbtest.Open(t, dialect.Postgres)
	stamps(t, db.DB)
	results := map[string][]any{}
	for _, tz := range []string{"UTC", "Pacific/Chatham", "America/St_Johns"} {
		conn, err := db.DB.Conn(ctx)
		require.NoError(t, err)
		_, err = conn.ExecContext(ctx, "SET TimeZone = '"+tz+"'")
		require.NoError(t, err)
		_, err = conn.ExecContext(ctx, `DELETE FROM stamps`)
		require.NoError(t, err)
		stamp(t, conn, db.Dialect, "minus1us", instant.RowTime(db.Dialect, keyInstant.Add(-time.Microsecond)))
		stamp(t, conn, db.Dialect, "at", instant.RowTime(db.Dialect, keyInstant))
		key := instant.Format(keyInstant)
		var max string
		require.NoError(t, conn.QueryRowContext(ctx, `SELECT `+instant.MaxExpr(db.Dialect, "ts")+` FROM stamps`).Scan(&max))
		maxKey, err := instant.FromColumn(max)
		require.NoError(t, err)
		var text string
		require.NoError(t, conn.QueryRowContext(ctx, `SELECT ts::text FROM stamps WHERE id = 'at'`).Scan(&text))
		results[tz] = []any{classify(t, conn, db.Dialect, key, "minus1us"), classify(t, conn, db.Dialect, key, "at"), maxKey, text}
		require.NoError(t, conn.Close())
	}
	want := []any{false, true, instant.Format(keyInstant), "2026-07-30 01:39:37.271235"}
	for tz, got := range results {
		require.Equal(t, want, got, tz)
	}
}

// A dialect other than the two gets no dialect's timestamp form: it panics
// where SQLite's text form used to be taken for anything not PostgreSQL.
func TestInstant_UnknownDialectFailsLoudly(t *testing.T) {
	const other = dialect.Dialect("mysql")
	for name, f := range map[string]func(){
		"ColumnExpr": func() { instant.ColumnExpr(other, "c") },
		"ParamExpr":  func() { instant.ParamExpr(other, "?") },
		"MaxExpr":    func() { instant.MaxExpr(other, "c") },
		"RowTime":    func() { instant.RowTime(other, time.Now()) },
	} {
		require.PanicsWithValue(t, `perdialect: unsupported dialect "mysql"`, f, name)
	}
}
