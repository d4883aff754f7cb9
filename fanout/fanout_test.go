package fanout_test

import (
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/fanout"
	"github.com/schemastate/schemastate/internal/hooks"
	"github.com/schemastate/schemastate/internal/instant"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/keys"
)

// since is an execution_since with no digits below the microsecond, so a row
// can be observed exactly at it (a key with sub-microsecond digits never
// equals a column value: AC-24e).
var since = time.Date(2026, 8, 1, 9, 30, 15, 500000000, time.UTC)

// activatedAt is a fully activated store whose keys name chosen instants:
// execution_since at since, capture_since an hour before it on a whole
// second (nine zero digits, as this build writes one), backfill_through
// before that.
func activatedAt(t *testing.T, db *dbtest.DB) {
	t.Helper()
	db.Host(t)
	setKey(t, db, keys.CaptureSince, instant.Format(since.Add(-time.Hour).Truncate(time.Second)))
	setKey(t, db, keys.BackfillThrough, instant.Format(since.Add(-2*time.Hour)))
	setKey(t, db, keys.ExecutionSince, instant.Format(since))
	mustReconcile(t, db)
}

// AC-25 and AC-24 point 3 on the live path: real ids are real on both sides
// of execution_since; an 'unknown' live row one microsecond before it is
// legacy, one exactly at it or after it is live (equality lands after).
func TestFanout_AC25_LiveClassesAtTheMicrosecondBoundary(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		activatedAt(t, db)
		record(t, db, "s1", "k1", "toolu_real_before", execA, since.Add(-time.Hour))
		record(t, db, "s1", "k1", "toolu_minus_1us", "", since.Add(-time.Microsecond))
		record(t, db, "s1", "k1", "toolu_at", "", since)
		record(t, db, "s1", "k1", "toolu_plus_1us", "", since.Add(time.Microsecond))
		record(t, db, "s1", "k1", "toolu_real_after", execB, since.Add(time.Second))
		record(t, db, "s1", "k1", "toolu_real_after_same_exec", execB, since.Add(2*time.Second))

		res := read(t, db, fanout.Scope{SessionID: "s1"})
		require.Equal(t, map[string]fanout.Identity{
			"toolu_real_before/" + execA + "/live":          fanout.Real,
			"toolu_minus_1us/unknown/live":                  fanout.UnrecordedLegacy,
			"toolu_at/unknown/live":                         fanout.UnrecordedLive,
			"toolu_plus_1us/unknown/live":                   fanout.UnrecordedLive,
			"toolu_real_after/" + execB + "/live":           fanout.Real,
			"toolu_real_after_same_exec/" + execB + "/live": fanout.Real,
		}, classes(res))
		s := res.Summary
		require.Equal(t, int64(6), s.Rows)
		require.Equal(t, int64(6), s.Subagents)
		require.Equal(t, ptr(int64(2)), s.Executions, "distinct real ids; the three 'unknown' rows are not one execution")
		require.Equal(t, map[string]int64{"live": 6, "backfill": 0}, s.BySource)
		require.Equal(t, keys.Activated, s.Coverage.State)
		require.Equal(t, ptr(instant.Format(since)), s.Coverage.ExecutionIdentityFrom)
		for _, d := range s.Coverage.Disclosures {
			require.NotContains(t, d, "second precision", "keys this build writes carry nine digits, whole second or not")
		}
	})
}

// AC-24e: the classification does not depend on the session's time zone or
// on the offset a stored value carries. On SQLite a host row stored in
// +02:00 one microsecond before the key is legacy and one at it is live; on
// PostgreSQL the same rows read the same through a pool whose TimeZone is
// Pacific/Chatham (+12:45).
func TestFanout_AC24e_TimeZoneIndependent(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		activatedAt(t, db)
		read := db.DB
		if db.Dialect == dialect.SQLite {
			session(t, db, "s1", "k1")
			plus2 := since.In(time.FixedZone("", 2*3600))
			for id, at := range map[string]time.Time{"toolu_minus_1us": plus2.Add(-time.Microsecond), "toolu_at": plus2} {
				_, err := db.DB.Exec(`INSERT INTO task_session_subagents (id, task_session_id, task_id, agent_execution_id, tool_call_id, is_async, source, observed_at, updated_at)
VALUES (?, 's1', 'k1', 'unknown', ?, 0, 'live', ?, ?)`, "row-"+id, id, at.Format("2006-01-02 15:04:05.999999-07:00"), at.Format("2006-01-02 15:04:05.999999-07:00"))
				require.NoError(t, err)
			}
		} else {
			record(t, db, "s1", "k1", "toolu_minus_1us", "", since.Add(-time.Microsecond))
			record(t, db, "s1", "k1", "toolu_at", "", since)
			var err error
			read, err = sql.Open("pgx", dbtest.WithParam(t, db.DSN, "timezone", "Pacific/Chatham"))
			require.NoError(t, err)
			t.Cleanup(func() { read.Close() })
			var tz string
			require.NoError(t, read.QueryRow(`SHOW TimeZone`).Scan(&tz))
			require.Equal(t, "Pacific/Chatham", tz)
		}
		// Stored in UTC by the live writer: a later instant whose SQLite text
		// sorts before the +02:00 rows'.
		record(t, db, "s1", "k1", "toolu_plus_1s", "", since.Add(time.Second))
		res, err := fanout.Read(ctx, read, fanout.Scope{})
		require.NoError(t, err)
		require.Equal(t, map[string]fanout.Identity{
			"toolu_minus_1us/unknown/live": fanout.UnrecordedLegacy,
			"toolu_at/unknown/live":        fanout.UnrecordedLive,
			"toolu_plus_1s/unknown/live":   fanout.UnrecordedLive,
		}, classes(res))
		var order []string
		for _, r := range res.Rows {
			order = append(order, r.ToolCallID)
		}
		require.Equal(t, []string{"toolu_minus_1us", "toolu_at", "toolu_plus_1s"}, order, "AC-13: by instant, not by stored text")
	})
}

// AC-25 revision 4, the self-heal window: the rebuild committed and the
// execution_since write failed, so live rows carrying real ids are observed
// before the key the next boot writes. Until then nothing is an identity
// (AC-24b); afterwards those ids are real — a reader that took "before
// execution_since" to mean "no identity" would discard them — while the
// pre-amendment row and an 'unknown' frame of the window are legacy.
func TestFanout_AC25_SelfHealWindowIdsAreReal(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		db.Host(t).Legacy(t)
		session(t, db, "s1", "k1")
		db.Exec(t, `INSERT INTO task_session_subagents (id, task_session_id, task_id, turn_id, tool_call_id, is_async, source, observed_at, updated_at)
 VALUES ('r1', 's1', 'k1', 't1', 'toolu_legacy', 0, 'live', '2026-07-30 01:39:37.271235+00:00', '2026-07-30 01:39:37.271235+00:00')`)
		failAt(t, db, hooks.FailpointExecutionSinceWrite, nil)
		// Observed in the past, so the key the next boot samples is after
		// every one of them however fast the writes are.
		now := time.Now()
		record(t, db, "s1", "k1", "toolu_window_a", execA, now.Add(-3*time.Millisecond))
		record(t, db, "s1", "k1", "toolu_window_b", execA, now.Add(-2*time.Millisecond))
		record(t, db, "s1", "k1", "toolu_window_unknown", "", now.Add(-time.Millisecond))

		res := read(t, db, fanout.Scope{SessionID: "s1"})
		require.Nil(t, res.Summary.Coverage.ExecutionIdentityFrom)
		require.Len(t, res.Rows, 4)
		for _, r := range res.Rows {
			require.Equal(t, fanout.NotAnIdentity, r.ExecutionIdentity, r.ToolCallID)
		}
		require.Nil(t, res.Summary.Executions, "AC-24b: executions are not counted")

		mustReconcile(t, db)
		res = read(t, db, fanout.Scope{SessionID: "s1"})
		ks := res.Summary.Coverage.Keys
		require.NotNil(t, ks.ExecutionSince)
		b, err := instant.NewBoundary(*ks.ExecutionSince)
		require.NoError(t, err)
		require.True(t, b.Time().After(now), "every window row precedes the key")
		require.Equal(t, map[string]fanout.Identity{
			"toolu_legacy/unknown/live":         fanout.UnrecordedLegacy,
			"toolu_window_a/" + execA + "/live": fanout.Real,
			"toolu_window_b/" + execA + "/live": fanout.Real,
			"toolu_window_unknown/unknown/live": fanout.UnrecordedLegacy,
		}, classes(res))
		require.Equal(t, ptr(int64(1)), res.Summary.Executions)
		require.Equal(t, int64(4), res.Summary.Subagents)
	})
}

// AC-24b: while execution_since is absent every row is not_an_identity and
// executions is null, whatever the rows carry; the disclosure says why.
func TestFanout_AC24b_WithoutExecutionSinceNothingIsAnIdentity(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		db.Host(t)
		failAt(t, db, hooks.FailpointExecutionSinceWrite, nil)
		record(t, db, "s1", "k1", "toolu_1", execA, time.Now())
		record(t, db, "s1", "k1", "toolu_2", "", time.Now())
		res := read(t, db, fanout.Scope{})
		require.Equal(t, map[string]fanout.Identity{
			"toolu_1/" + execA + "/live": fanout.NotAnIdentity,
			"toolu_2/unknown/live":       fanout.NotAnIdentity,
		}, classes(res))
		s := res.Summary
		require.Nil(t, s.Executions)
		require.Equal(t, int64(2), s.ByIdentity[fanout.NotAnIdentity])
		require.Equal(t, keys.CaptureOnly, s.Coverage.State)
		require.Contains(t, s.Coverage.Disclosures, "execution_since is absent: no agent_execution_id on this installation is an execution identity, and executions are not counted (AC-24b).")
	})
}

// AC-25 on a retried backfill: the first boot wrote execution_since and its
// backfill failed; a live frame with a real id and the host's message for
// the same tool call both land after the key; the retry backfills that
// message as an 'unknown' row. That row is unrecorded_backfill, not
// unrecorded_live (a time-only reader calls it a live regression), and with
// the live row it is one subagent, not two. Until the retry, capture_since
// is absent and all fan-out is unknown (AC-24c).
func TestFanout_AC25_RetriedBackfill(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		db.Host(t)
		// execution_since is sampled at a known instant in the past, so the
		// frame and the messages are after it by construction.
		since := time.Now().Add(-time.Second)
		failAt(t, db, hooks.FailpointBackfillInserted, func() time.Time { return since })
		now := since.Add(time.Millisecond)
		record(t, db, "s1", "k1", "toolu_1", execA, now)
		message(t, db, "m1", "s1", "k1", "toolu_1", now.Add(time.Millisecond))
		message(t, db, "m2", "s1", "k1", "toolu_2", now.Add(2*time.Millisecond))

		before := read(t, db, fanout.Scope{}).Summary.Coverage
		require.Equal(t, keys.ExecutionOnly, before.State)
		require.True(t, before.AllFanoutUnknown)
		require.Nil(t, before.CompleteFrom)
		require.Nil(t, before.FanoutUnknownBefore)

		mustReconcile(t, db)
		res := read(t, db, fanout.Scope{SessionID: "s1"})
		require.Equal(t, map[string]fanout.Identity{
			"toolu_1/" + execA + "/live": fanout.Real,
			"toolu_1/unknown/backfill":   fanout.UnrecordedBackfill,
			"toolu_2/unknown/backfill":   fanout.UnrecordedBackfill,
		}, classes(res))
		b, err := instant.NewBoundary(*res.Summary.Coverage.ExecutionIdentityFrom)
		require.NoError(t, err)
		for _, r := range res.Rows {
			require.True(t, r.ObservedAt.After(b.Time()), "%s observed after execution_since", r.ToolCallID)
		}
		s := res.Summary
		require.Equal(t, int64(3), s.Rows)
		require.Equal(t, int64(2), s.Subagents, "the live and the backfilled row of toolu_1 are one subagent")
		require.Equal(t, ptr(int64(1)), s.Executions)
		require.Equal(t, map[string]int64{"live": 1, "backfill": 2}, s.BySource)
		c := s.Coverage
		require.Equal(t, keys.Activated, c.State)
		require.False(t, c.AllFanoutUnknown)
		require.False(t, c.NothingToBackfill)
		require.Equal(t, c.Keys.CaptureSince, c.CompleteFrom)
		require.Equal(t, ptr(instant.Format(now.Add(2*time.Millisecond).Truncate(time.Microsecond))), c.FanoutUnknownBefore,
			"backfill_through: the newest message the backfill covers")
	})
}

// AC-24f: on a fresh installation backfill_through is ” — the backfill
// matched nothing. That is no window of unknown fan-out (not "no boundary
// known"): coverage is complete from capture_since.
func TestFanout_AC24f_EmptyBackfillThroughIsNothingToRecover(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		db.Host(t)
		mustReconcile(t, db)
		record(t, db, "s1", "k1", "toolu_1", execA, time.Now())
		c := read(t, db, fanout.Scope{}).Summary.Coverage
		require.Equal(t, ptr(""), c.Keys.BackfillThrough)
		require.True(t, c.NothingToBackfill)
		require.False(t, c.AllFanoutUnknown)
		require.Nil(t, c.FanoutUnknownBefore)
		require.NotNil(t, c.CompleteFrom)
		require.Equal(t, c.Keys.CaptureSince, c.CompleteFrom)
		require.Contains(t, c.Disclosures, "backfill_through is '': the backfill matched nothing, so no pre-capture history is claimed as covered and none needs to be; history after capture_since has known fan-out (AC-24f).")
	})
}

// AC-24d's partial pair (capture_since without backfill_through, left by a
// pre-amendment build) is read as fan-out unknown before capture_since.
func TestFanout_AC25_PartialKeyPairUnknownBeforeCaptureSince(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		db.Host(t)
		setKey(t, db, keys.CaptureSince, "2026-07-30T01:39:37Z")
		c := read(t, db, fanout.Scope{}).Summary.Coverage
		require.False(t, c.TablePresent)
		require.Equal(t, ptr("2026-07-30T01:39:37Z"), c.FanoutUnknownBefore)
		require.Equal(t, ptr("2026-07-30T01:39:37Z"), c.CompleteFrom)
		require.False(t, c.NothingToBackfill)
		require.Contains(t, c.Disclosures, "capture_since 2026-07-30T01:39:37Z is at second precision (written by an earlier build and never rewritten): that boundary is ambiguous by up to one second (AC-24 point 5).")
		n := 0
		for _, d := range c.Disclosures {
			if strings.Contains(d, "second precision") {
				n++
			}
		}
		require.Equal(t, 1, n, "only the key that has no fraction")
	})
}

// AC-13: a session's rows by observed_at as an instant, then tool_call_id,
// then agent_execution_id; a task's rows span its sessions, ordered the same
// with task_session_id last; the whole store is every row; an unknown
// session is an empty result, not an error.
func TestFanout_AC13_OrderAndScopes(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		activatedAt(t, db)
		t0 := since.Add(time.Minute)
		// s2's row is written first, so only the task_session_id tiebreak
		// puts s1's equal row before it.
		record(t, db, "s2", "k1", "toolu_a", execB, t0)
		record(t, db, "s1", "k1", "toolu_b", execB, t0)
		record(t, db, "s1", "k1", "toolu_b", execA, t0)
		record(t, db, "s1", "k1", "toolu_a", execB, t0)
		record(t, db, "s1", "k1", "toolu_0", "", t0.Add(time.Microsecond))
		record(t, db, "s1", "k1", "toolu_z", "", t0.Add(-time.Microsecond))
		record(t, db, "s3", "k2", "toolu_x", execA, t0)

		order := func(res *fanout.Result) []string {
			var out []string
			for _, r := range res.Rows {
				out = append(out, r.TaskSessionID+" "+r.ToolCallID+" "+r.AgentExecutionID)
			}
			return out
		}
		require.Equal(t, []string{
			"s1 toolu_z unknown",
			"s1 toolu_a " + execB,
			"s1 toolu_b " + execA,
			"s1 toolu_b " + execB,
			"s1 toolu_0 unknown",
		}, order(read(t, db, fanout.Scope{SessionID: "s1"})))
		task := read(t, db, fanout.Scope{TaskID: "k1"})
		require.Equal(t, []string{
			"s1 toolu_z unknown",
			"s1 toolu_a " + execB,
			"s2 toolu_a " + execB,
			"s1 toolu_b " + execA,
			"s1 toolu_b " + execB,
			"s1 toolu_0 unknown",
		}, order(task))
		require.Equal(t, int64(5), task.Summary.Subagents, "s1/toolu_b under two executions is one (session, tool call)")
		require.Equal(t, ptr(int64(2)), task.Summary.Executions)
		require.Len(t, read(t, db, fanout.Scope{}).Rows, 7)
		require.Equal(t, []string{"s3 toolu_x " + execA}, order(read(t, db, fanout.Scope{SessionID: "s3", TaskID: "k2"})))

		none := read(t, db, fanout.Scope{SessionID: "no-such-session"})
		require.Empty(t, none.Rows)
		require.NotNil(t, none.Rows, "an empty list, not null")
		require.Zero(t, none.Summary.Rows)
		require.Equal(t, ptr(int64(0)), none.Summary.Executions)
	})
}

// A database without the tables reads as the state it is: no rows, keys
// absent, nothing is an identity — not an error. A key that is not an
// instant cannot place a row, and is an error naming it.
func TestFanout_MissingTablesAndBadKey(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		res := read(t, db, fanout.Scope{SessionID: "s1"})
		require.Empty(t, res.Rows)
		c := res.Summary.Coverage
		require.False(t, c.TablePresent)
		require.False(t, c.KeysRead)
		require.Equal(t, keys.Inactive, c.State)
		require.True(t, c.AllFanoutUnknown)
		require.Nil(t, res.Summary.Executions)

		db.Host(t)
		setKey(t, db, keys.ExecutionSince, "yesterday")
		_, err := fanout.Read(ctx, db.DB, fanout.Scope{})
		require.ErrorIs(t, err, fanout.ErrBadKey)
		require.ErrorContains(t, err, `subagent_context_execution_since = "yesterday"`)
		_, err = fanout.Count(ctx, db.DB, fanout.Scope{})
		require.ErrorIs(t, err, fanout.ErrBadKey)
	})
}

// A table that predates the amendment (installed-base state 3, not yet
// reconciled) has no agent_execution_id: its rows still read, each with the
// 'unknown' the reconcile will give it (AC-31), and the read says so.
func TestFanout_PreAmendmentTableReadsWithTheSentinel(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		db.Host(t).Legacy(t)
		session(t, db, "s1", "t1")
		_, err := db.DB.Exec(db.Q(`INSERT INTO task_session_subagents (id, task_session_id, task_id, tool_call_id, source, observed_at, updated_at)
VALUES ('r1', 's1', 't1', 'tc1', 'live', '2026-01-02 03:04:05', '2026-01-02 03:04:05')`))
		require.NoError(t, err)

		res := read(t, db, fanout.Scope{SessionID: "s1"})
		require.Len(t, res.Rows, 1)
		require.Equal(t, "unknown", res.Rows[0].AgentExecutionID)
		require.Equal(t, fanout.NotAnIdentity, res.Rows[0].ExecutionIdentity)
		require.True(t, res.Summary.Coverage.PredatesAmendment)
		require.Equal(t, int64(1), res.Summary.Subagents)

		s, err := fanout.Count(ctx, db.DB, fanout.Scope{})
		require.NoError(t, err)
		require.Equal(t, int64(1), s.Rows)
		require.True(t, s.Coverage.PredatesAmendment)
	})
}
