package keys_test

import (
	"context"
	"log/slog"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/internal/instant"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/keys"
	"github.com/schemastate/schemastate/reconcile"
)

var ctx = context.Background()

// nanoForm is the only form this build writes: RFC3339, UTC, nine digits.
var nanoForm = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z$`)

// AC-24 point 3 / AC-24e precision: a key round-trips at nanosecond precision
// and is never the second-precision time.RFC3339 form — not even on a whole
// second, where time.RFC3339Nano would collapse to it.
func TestKeys_AC24e_FormatRoundTripsAtNanosecondPrecision(t *testing.T) {
	chatham := time.FixedZone("+12:45", 12*3600+45*60)
	cases := map[string]time.Time{
		"nanoseconds":    time.Date(2026, 7, 30, 1, 39, 37, 123456789, time.UTC),
		"whole second":   time.Date(2026, 7, 30, 1, 39, 37, 0, time.UTC),
		"one nanosecond": time.Date(2026, 7, 30, 1, 39, 37, 1, time.UTC),
		"non-UTC zone":   time.Date(2026, 7, 30, 14, 24, 37, 271235000, chatham),
	}
	for name, in := range cases {
		t.Run(name, func(t *testing.T) {
			v := instant.Format(in)
			require.Regexp(t, nanoForm, v)
			require.NotEqual(t, in.UTC().Format(time.RFC3339), v)
			back, err := instant.Parse(v)
			require.NoError(t, err)
			require.True(t, back.Equal(in), "%s → %s → %s", in, v, back)
			require.Equal(t, v, instant.Format(back))
		})
	}
	require.Equal(t, "2026-07-30T01:39:37.000000000Z", instant.Format(cases["whole second"]))
	require.Equal(t, "2026-07-30T01:39:37.271235000Z", instant.Format(cases["non-UTC zone"]))
	require.Regexp(t, nanoForm, instant.Format(time.Now()))
}

// AC-24e precision, end to end: the three keys a reconcile of this build
// writes are all the nanosecond form and survive the database byte for byte.
func TestKeys_AC24e_EveryKeyThisBuildWritesIsNanosecondForm(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		db.Host(t)
		db.Exec(t, `INSERT INTO task_sessions (id, task_id) VALUES ('s1', 'k1')`)
		_, err := db.DB.Exec(db.Q(`INSERT INTO task_session_messages (id, task_session_id, task_id, turn_id, content, metadata, created_at, updated_at)
			VALUES ('m1', 's1', 'k1', 't', '', ?, ?, ?)`),
			`{"tool_call_id":"toolu_1","normalized":{"kind":"subagent_task","subagent_task":{}}}`,
			instant.RowTime(db.Dialect, time.Date(2026, 7, 30, 1, 39, 37, 0, time.UTC)),
			instant.RowTime(db.Dialect, time.Date(2026, 7, 30, 1, 39, 37, 0, time.UTC)))
		require.NoError(t, err)
		_, err = reconcile.Reconcile(ctx, db.DB, reconcile.WithLogger(slog.New(slog.DiscardHandler)))
		require.NoError(t, err)
		ks, err := keys.Read(ctx, db.DB, db.Dialect)
		require.NoError(t, err)
		for name, v := range map[string]*string{keys.CaptureSince: ks.CaptureSince, keys.BackfillThrough: ks.BackfillThrough, keys.ExecutionSince: ks.ExecutionSince} {
			require.NotNil(t, v, name)
			require.Regexp(t, nanoForm, *v, name)
			p, err := instant.Parse(*v)
			require.NoError(t, err)
			require.Equal(t, *v, instant.Format(p), name)
		}
		require.Equal(t, "2026-07-30T01:39:37.000000000Z", *ks.BackfillThrough, "a whole-second created_at still yields the nine-digit form")
	})
}

// AC-24f: the empty backfill_through is a sentinel; parsing it as an instant fails loudly.
func TestKeys_AC24f_EmptyValueIsNeverAnInstant(t *testing.T) {
	_, err := instant.Parse("")
	require.ErrorIs(t, err, instant.ErrEmptySentinel)
	_, err = instant.NewBoundary("")
	require.ErrorIs(t, err, instant.ErrEmptySentinel)
	_, err = instant.NewBoundary("2026-07-30 01:39:37")
	require.Error(t, err, "a key is RFC3339, not the column's form")
	_, err = instant.NewBoundary("2026-07-30T01:39:37Z")
	require.NoError(t, err, "AC-24 point 5: a legacy second-precision key is still a valid boundary")
}

// AC-24 write-once: a present key is never rewritten, whatever its precision,
// and a written key reads back byte for byte.
func TestKeys_AC24_WriteOnceNeverRewrites(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		db.Host(t)
		wrote, err := keys.WriteOnce(ctx, db.DB, db.Dialect, keys.CaptureSince, "2026-07-30T01:39:37Z")
		require.NoError(t, err)
		require.True(t, wrote)
		wrote, err = keys.WriteOnce(ctx, db.DB, db.Dialect, keys.CaptureSince, instant.Format(time.Now()))
		require.NoError(t, err)
		require.False(t, wrote)
		v, ok, err := keys.Get(ctx, db.DB, db.Dialect, keys.CaptureSince)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, "2026-07-30T01:39:37Z", v)

		nano := instant.Format(time.Date(2026, 7, 30, 1, 39, 37, 123456789, time.UTC))
		_, err = keys.WriteOnce(ctx, db.DB, db.Dialect, keys.ExecutionSince, nano)
		require.NoError(t, err)
		_, err = keys.WriteOnce(ctx, db.DB, db.Dialect, keys.BackfillThrough, "")
		require.NoError(t, err)
		ks, err := keys.Read(ctx, db.DB, db.Dialect)
		require.NoError(t, err)
		require.Equal(t, nano, *ks.ExecutionSince)
		require.Equal(t, "", *ks.BackfillThrough, "the sentinel is a present key")

		_, ok, err = keys.Get(ctx, db.DB, db.Dialect, "no_such_key")
		require.NoError(t, err)
		require.False(t, ok)
	})
}

// AC-24c: the four states of (capture_since, execution_since); backfill_through
// is not a dimension of the state, but is half of the AC-24d guard.
func TestKeys_AC24c_StateAndGuard(t *testing.T) {
	v := "2026-07-30T01:39:37.000000000Z"
	empty := ""
	cases := []struct {
		set   keys.Set
		state keys.State
		done  bool
	}{
		{keys.Set{CaptureSince: &v, BackfillThrough: &v, ExecutionSince: &v}, keys.Activated, true},
		{keys.Set{CaptureSince: &v, BackfillThrough: &empty}, keys.CaptureOnly, true},
		{keys.Set{CaptureSince: &v}, keys.CaptureOnly, false},
		{keys.Set{ExecutionSince: &v, BackfillThrough: &v}, keys.ExecutionOnly, false},
		{keys.Set{ExecutionSince: &v}, keys.ExecutionOnly, false},
		{keys.Set{BackfillThrough: &v}, keys.Inactive, false},
		{keys.Set{}, keys.Inactive, false},
	}
	for _, c := range cases {
		require.Equal(t, c.state, c.set.State(), "%+v", c.set)
		require.Equal(t, c.done, c.set.BackfillDone(), "%+v", c.set)
	}
}
