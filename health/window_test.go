package health_test

import (
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/health"
	"github.com/schemastate/schemastate/internal/instant"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/keys"
)

// The comparison window: which messages and rows the anti-joins count, by
// time (the AC-24e boundary at capture_since and the key states of AC-24c)
// and by document (AC-19, AC-28: duplicated members, large documents,
// unreadable created_at).

// AC-24e, the one-microsecond boundary: a message or row exactly 1 µs before
// capture_since is outside the window; exactly at it is inside. Applies to the
// shortfall, the excess, the collision count and the scoped MAX.
func TestHealth_AC24e_OneMicrosecondBoundary(t *testing.T) {
	eachActivated(t, func(t *testing.T, s *store) {
		before := k.Add(-time.Microsecond)
		s.message("s1", "tc-msg-before", before)
		s.row("s1", "exec-1", "tc-row-before", "live", before)
		s.row("s1", "exec-1", "tc-collide-before", "live", before)
		s.row("s1", "exec-2", "tc-collide-before", "live", before)
		r := s.eval()
		require.Equal(t, counts{health.NothingSinceActivation, 0, 0, 0}, countsOf(r))
		require.Nil(t, r.LastObservedAt)

		s.message("s1", "tc-msg-at", k)
		s.row("s1", "exec-1", "tc-row-at", "live", k)
		s.row("s1", "exec-1", "tc-collide-at", "live", k)
		s.row("s1", "exec-2", "tc-collide-at", "live", k)
		r = s.eval()
		require.Equal(t, counts{health.Shortfall, 1, 2, 1}, countsOf(r))
		require.Equal(t, instant.Format(k), *r.LastObservedAt)
	})
}

// AC-24e, sub-microsecond key digits: the key is rounded up to the
// microsecond, so a column value at the truncated microsecond is before it.
func TestHealth_AC24e_NanosecondKeyRoundsUp(t *testing.T) {
	eachStore(t, func(t *testing.T, s *store) {
		kn := k.Add(300 * time.Nanosecond)
		s.key(keys.CaptureSince, instant.Format(kn))
		s.message("s1", "tc-truncated", k)                  // < kn
		s.message("s1", "tc-next", k.Add(time.Microsecond)) // > kn
		require.Equal(t, counts{health.Shortfall, 1, 0, 0}, countsOf(s.eval()))
	})
}

// AC-24e, the same-calendar-day case: a raw string comparison of
// "2026-07-30 23:59:59…" against "2026-07-30T…" snaps the boundary to the
// date and would read these as before the key.
func TestHealth_AC24e_SameCalendarDay(t *testing.T) {
	eachStore(t, func(t *testing.T, s *store) {
		key := time.Date(2026, 7, 30, 1, 39, 37, 271235000, time.UTC)
		s.activate(key)
		late := time.Date(2026, 7, 30, 23, 59, 59, 999999000, time.UTC)
		s.message("s1", "tc-late-same-day", late)
		s.row("s1", "exec-1", "tc-row-same-day", "live", key.Add(time.Hour))
		s.message("s1", "tc-early-same-day", time.Date(2026, 7, 30, 0, 0, 1, 0, time.UTC)) // before the key
		r := s.eval()
		require.Equal(t, counts{health.Shortfall, 1, 1, 0}, countsOf(r))
		require.Equal(t, instant.Format(key.Add(time.Hour)), *r.LastObservedAt)
	})
}

// AC-24e, storage forms: on SQLite, stored timestamps carrying a non-UTC
// offset (and a whole second with no fraction) classify by instant; on
// PostgreSQL, an exotic session TimeZone shifts nothing, for rows written and
// evaluated under it.
func TestHealth_AC24e_OffsetsAndSessionTimeZone(t *testing.T) {
	eachStore(t, func(t *testing.T, s *store) {
		s.activate(k) // 2026-07-30T12:00:00.500000Z
		eval := s.db.DB
		if s.db.Dialect == dialect.SQLite {
			s.rawMessage("s1", "task-s1", subagentMeta("tc-before-ist"), "2026-07-30 17:30:00.499999+05:30") // k - 1µs
			s.rawMessage("s1", "task-s1", subagentMeta("tc-at-pdt"), "2026-07-30 05:00:00.5-07:00")          // k
			s.rawRow("s1", "exec-1", "tc-row-whole-second", "live", "2026-07-30 08:00:01+00:00")             // before
			s.rawRow("s1", "exec-1", "tc-row-chatham", "live", "2026-07-31 01:45:00.5+13:45")                // k
			s.rawMessage("s1", "task-s1", subagentMeta("tc-after-pdt"), "2026-07-30 06:00:00-07:00")         // k + 59m59.5s
			s.rawRow("s1", "exec-1", "tc-row-azores", "live", "2026-07-30 11:00:00.600001-01:00")            // k + 100.001ms
		} else {
			// Every connection of this pool runs with TimeZone Pacific/Chatham (+12:45/+13:45).
			u := s.db.DSN + "&timezone=Pacific%2FChatham"
			other, err := sql.Open("pgx", u)
			require.NoError(t, err)
			t.Cleanup(func() { other.Close() })
			var tz string
			require.NoError(t, other.QueryRowContext(s.ctx, "SHOW TimeZone").Scan(&tz))
			require.Equal(t, "Pacific/Chatham", tz)
			ins := func(q string, args ...any) {
				_, err := other.ExecContext(s.ctx, q, args...)
				require.NoError(t, err)
			}
			msg := `INSERT INTO task_session_messages (id, task_session_id, task_id, turn_id, content, metadata, created_at, updated_at) VALUES ($1, 's1', 'task-s1', 't', '…', $2, $3, $3)`
			ins(msg, "tz-1", subagentMeta("tc-before-ist"), instant.RowTime(dialect.Postgres, k.Add(-time.Microsecond)))
			ins(msg, "tz-2", subagentMeta("tc-at-pdt"), instant.RowTime(dialect.Postgres, k))
			row := `INSERT INTO task_session_subagents (id, task_session_id, task_id, tool_call_id, observed_at, updated_at) VALUES ($1, 's1', 'task-s1', $2, $3, $3)`
			ins(row, "tz-r1", "tc-row-whole-second", instant.RowTime(dialect.Postgres, time.Date(2026, 7, 30, 8, 0, 1, 0, time.UTC)))
			ins(row, "tz-r2", "tc-row-chatham", instant.RowTime(dialect.Postgres, k))
			ins(msg, "tz-3", subagentMeta("tc-after-pdt"), instant.RowTime(dialect.Postgres, time.Date(2026, 7, 30, 13, 0, 0, 0, time.UTC)))
			ins(row, "tz-r3", "tc-row-azores", instant.RowTime(dialect.Postgres, k.Add(100*time.Millisecond+time.Microsecond)))
			var stored string
			require.NoError(t, other.QueryRowContext(s.ctx, `SELECT to_char(created_at, 'YYYY-MM-DD HH24:MI:SS.US') FROM task_session_messages WHERE id = 'tz-2'`).Scan(&stored))
			require.Equal(t, "2026-07-30 12:00:00.500000", stored, "UTC wall clock, unshifted by the session TimeZone")
			eval = other
		}
		r, err := health.Evaluate(s.ctx, eval)
		require.NoError(t, err)
		require.Equal(t, counts{health.Shortfall, 2, 2, 0}, countsOf(r))
		require.Equal(t, instant.Format(k.Add(100*time.Millisecond+time.Microsecond)), *r.LastObservedAt)
	})
}

// AC-29, attribution: with backfilled and pre-activation rows present (an
// unscoped MAX would be non-NULL) and nothing observed since activation, the
// scoped MAX is NULL and reads "nothing produced since activation".
func TestHealth_AC29_NothingSinceActivation(t *testing.T) {
	eachActivated(t, func(t *testing.T, s *store) {
		s.message("s1", "tc-old-1", k.Add(-48*time.Hour))
		s.row("s1", "unknown", "tc-old-1", "backfill", k.Add(-48*time.Hour))
		s.message("s1", "tc-old-2", k.Add(-time.Hour))
		s.row("s1", "exec-0", "tc-old-2", "live", k.Add(-time.Hour))
		s.row("s1", "unknown", "tc-legacy", "live", k.Add(-time.Millisecond))

		var unscoped sql.NullString
		require.NoError(t, s.db.QueryRowContext(s.ctx, `SELECT MAX(observed_at) FROM task_session_subagents`).Scan(&unscoped))
		require.True(t, unscoped.Valid, "the seed must make an unscoped MAX non-NULL")

		r := s.eval()
		require.Equal(t, counts{health.NothingSinceActivation, 0, 0, 0}, countsOf(r))
		require.Nil(t, r.LastObservedAt)

		// The very first post-activation subagent is the one missed: the
		// shortfall outranks the empty MAX.
		s.message("s1", "tc-first", k.Add(time.Second))
		r = s.eval()
		require.Equal(t, counts{health.Shortfall, 1, 0, 0}, countsOf(r))
		require.Nil(t, r.LastObservedAt)
	})
}

// AC-28a / AC-24c: with capture_since absent the comparison is not run — the
// messages table is renamed away and health still answers, with null counts —
// while both states with capture_since present run it.
func TestHealth_AC28a_AC24c_AbsentKeyRunsNoComparison(t *testing.T) {
	for _, tc := range []struct {
		name             string
		capture, execute bool
		state            keys.State
	}{
		{"absent_absent", false, false, keys.Inactive},
		{"absent_present", false, true, keys.ExecutionOnly},
		{"present_absent", true, false, keys.CaptureOnly},
		{"present_present", true, true, keys.Activated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eachStore(t, func(t *testing.T, s *store) {
				if tc.capture {
					s.key(keys.CaptureSince, instant.Format(k))
				}
				if tc.execute {
					s.key(keys.ExecutionSince, instant.Format(k))
				}
				s.captured("s1", "tc-a", k.Add(time.Second))
				s.exec(`ALTER TABLE task_session_messages RENAME TO task_session_messages_away`)

				r, err := health.Evaluate(s.ctx, s.db.DB)
				require.Equal(t, tc.state, func() keys.State {
					ks, kerr := keys.Read(s.ctx, s.db.DB, s.db.Dialect)
					require.NoError(t, kerr)
					return ks.State()
				}())
				if tc.capture {
					// Control: the comparison needs the messages table, so
					// the rename is visible exactly when it would run.
					require.ErrorIs(t, err, health.ErrMissingTables)
					require.ErrorContains(t, err, "task_session_messages")
					return
				}
				require.NoError(t, err)
				require.Equal(t, &health.Report{Verdict: health.NotActivated, KeyState: tc.state}, r)
			})
		})
	}
}

// AC-24e: a capture_since that is not an instant is an error naming the key
// and the value — never a silent fallback to an unscoped comparison.
func TestHealth_AC24e_UnparseableCaptureSinceIsAnError(t *testing.T) {
	eachStore(t, func(t *testing.T, s *store) {
		for _, v := range []string{"yesterday", "", "2026-07-30 01:39:37"} {
			s.exec(`DELETE FROM kandev_meta`)
			s.key(keys.CaptureSince, v)
			_, err := health.Evaluate(s.ctx, s.db.DB)
			require.ErrorIs(t, err, health.ErrBadKey, "value %q", v)
			require.ErrorContains(t, err, keys.CaptureSince)
			require.ErrorContains(t, err, `"`+v+`"`)
		}
	})
}

// AC-19, AC-28: a member named twice reads its last value on both dialects,
// as the backfill reads it (README, design notes): the message names tool
// call b, so b's row accounts for it and no key a is expected; a later kind
// decides whether the message is a subagent message at all.
func TestHealth_AC28_DuplicatedMemberLastWinsOnBothDialects(t *testing.T) {
	eachActivated(t, func(t *testing.T, s *store) {
		at := s.ts(k.Add(time.Second))
		s.rawMessage("s1", "task-s1", `{"tool_call_id":"a","normalized":{"kind":"subagent_task"},"tool_call_id":"b"}`, at)
		s.row("s1", "exec-1", "b", "live", k.Add(time.Second))
		s.rawMessage("s1", "task-s1", `{"tool_call_id":"c","normalized":{"kind":"subagent_task","kind":"read"}}`, at)
		s.rawMessage("s1", "task-s1", `{"tool_call_id":"d","normalized":{"kind":"read"},"normalized":{"kind":"subagent_task"}}`, at)
		s.rawMessage("s1", "task-s1", `{"tool_call_id":"e","tool_call_id":7,"normalized":{"kind":"subagent_task"}}`, at)
		require.Equal(t, counts{health.Shortfall, 1, 0, 0}, countsOf(s.eval()), "only d is expected and missing")
	})
}

// AC-19, AC-28: validity is decided exactly, for a document of any size, on
// both dialects — by each dialect's own parser, as the backfill decides it.
// A valid ~180 KB subagent document whose row is missing is a shortfall on
// PostgreSQL as on SQLite (a plain-SQL tokenizer bounded to 100 000
// characters read it as malformed, hiding the missed write on PostgreSQL
// only), and malformed candidates of any size among valid ones are not
// messages. On PostgreSQL the evaluation runs in a session whose
// transactions are read-only by default, as on a replica: nothing is
// created.
func TestHealth_AC28_LargeDocumentsAreDecidedExactly(t *testing.T) {
	eachActivated(t, func(t *testing.T, s *store) {
		at := k.Add(time.Second)
		// A tool call's file list and line offsets: ~200 KB of ordinary JSON.
		big := func(toolCallID string) string {
			files, offsets := make([]string, 6000), make([]string, 15000)
			for i := range files {
				files[i] = fmt.Sprintf(`"src/f%05d.go"`, i)
			}
			for i := range offsets {
				offsets[i] = fmt.Sprint(100000 + i*7)
			}
			return `{"tool_call_id":"` + toolCallID + `","raw_input":{"files":[` + strings.Join(files, ",") +
				`],"offsets":[` + strings.Join(offsets, ",") +
				`]},"status":"completed","normalized":{"kind":"subagent_task","subagent_task":{"status":"completed"}}}`
		}
		require.Greater(t, len(big("tc-big")), 180000)
		require.Less(t, len(big("tc-big")), 220000)
		for i := 0; i < 40; i++ {
			s.captured("s1", fmt.Sprintf("tc-%02d", i), at)
		}
		s.rawMessage("s1", "task-s1", big("tc-big"), s.ts(at)) // valid, its row missing: a shortfall
		s.rawMessage("s1", "task-s1", big("tc-big-bad")[:150000], s.ts(at))
		s.rawMessage("s1", "task-s1", big("tc-big-trail")+" x", s.ts(at))
		s.rawMessage("s1", "task-s1", `{"tool_call_id":"tc-zero","n":01,"normalized":{"kind":"subagent_task"}}`, s.ts(at))
		s.rawMessage("s1", "task-s1", "{\"tool_call_id\":\"tc-ctl\",\"d\":\"a\tb\",\"normalized\":{\"kind\":\"subagent_task\"}}", s.ts(at))
		s.captured("s1", "tc-40", at)
		s.message("s1", "tc-missed", at)

		evalDB := s.db.DB
		if s.db.Dialect == dialect.Postgres {
			ro, err := sql.Open("pgx", s.db.DSN+"&default_transaction_read_only=on")
			require.NoError(t, err)
			t.Cleanup(func() { ro.Close() })
			var mode string
			require.NoError(t, ro.QueryRow(`SHOW default_transaction_read_only`).Scan(&mode))
			require.Equal(t, "on", mode)
			evalDB = ro
		}
		r, err := health.Evaluate(s.ctx, evalDB)
		require.NoError(t, err)
		require.Equal(t, counts{health.Shortfall, 2, 0, 0}, countsOf(r), "tc-big and tc-missed")
	})
}

// AC-28: a subagent message whose created_at is not a time cannot be placed
// before or after capture_since; it is counted in unreadable_created_at (when
// it carries the identities the shortfall side requires — the messages the
// backfill counts too), never dropped unseen. Only SQLite's untyped text can
// hold one; on PostgreSQL the count is 0 (pinned by the differential test).
func TestHealth_AC28_UnreadableCreatedAtIsCounted(t *testing.T) {
	db := dbtest.Open(t, dialect.SQLite)
	s := newStore(t, db)
	s.activate(k)
	s.captured("s1", "tc-ok", k.Add(time.Second))
	s.rawMessage("s1", "task-s1", subagentMeta("tc-bad1"), "not a time")
	s.rawMessage("s1", "task-s1", subagentMeta("tc-bad2"), "")
	s.rawMessage("s1", "task-s1", subagentMeta("tc-now"), "now")         // datetime(): the moment of reading
	s.rawMessage("s1", "", subagentMeta("tc-no-task"), "x")              // not expected: no task id
	s.rawMessage("s1", "task-s1", `{"normalized":{"kind":"read"}}`, "x") // not a subagent message
	r := s.eval()
	require.Equal(t, counts{health.Healthy, 0, 0, 0}, countsOf(r))
	require.NotNil(t, r.UnreadableCreatedAt)
	require.EqualValues(t, 3, *r.UnreadableCreatedAt)
}
