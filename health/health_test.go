package health_test

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/health"
	"github.com/schemastate/schemastate/internal/instant"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/keys"
)

// AC-28/AC-29, the banked-excess test: a cross-execution collision (two rows,
// one message) must not absorb the first missed write.
func TestHealth_AC28_AC29_BankedExcessDivergesOnFirstMiss(t *testing.T) {
	eachActivated(t, func(t *testing.T, s *store) {
		s.captured("s1", "tc-a", k.Add(time.Second))
		s.message("s1", "tc-collide", k.Add(2*time.Second))
		s.row("s1", "exec-1", "tc-collide", "live", k.Add(2*time.Second))
		s.row("s1", "exec-2", "tc-collide", "live", k.Add(3*time.Second)) // AC-32: same tool_call_id, later execution
		require.Equal(t, counts{health.Healthy, 0, 0, 1}, countsOf(s.eval()))

		// The writer stops; message writes continue.
		s.message("s1", "tc-missed-1", k.Add(time.Minute))
		require.Equal(t, counts{health.Shortfall, 1, 0, 1}, countsOf(s.eval()), "first missed write must diverge despite the banked row")
		s.message("s1", "tc-missed-2", k.Add(2*time.Minute))
		require.Equal(t, counts{health.Shortfall, 2, 0, 1}, countsOf(s.eval()))
	})
}

// AC-28, the two-direction test: a standing excess (a row whose message write
// failed) and a stopped writer; the shortfall goes non-zero on the first miss.
func TestHealth_AC28_TwoDirectionsNeverNetted(t *testing.T) {
	eachActivated(t, func(t *testing.T, s *store) {
		s.captured("s1", "tc-a", k.Add(time.Second))
		s.row("s1", "exec-1", "tc-message-write-failed", "live", k.Add(2*time.Second))
		require.Equal(t, counts{health.Healthy, 0, 1, 0}, countsOf(s.eval()))

		s.message("s1", "tc-missed", k.Add(time.Minute))
		r := s.eval()
		require.Equal(t, counts{health.Shortfall, 1, 1, 0}, countsOf(r), "a signed difference would read 0 here")
	})
}

// AC-28, excess does not alarm: standing excess, healthy writer.
func TestHealth_AC28_ExcessDoesNotAlarm(t *testing.T) {
	eachActivated(t, func(t *testing.T, s *store) {
		s.captured("s1", "tc-a", k.Add(time.Second))
		s.captured("s1", "tc-b", k.Add(2*time.Second))
		s.row("s1", "exec-1", "tc-orphan-1", "live", k.Add(3*time.Second))
		s.row("s1", "exec-1", "tc-orphan-2", "live", k.Add(4*time.Second))
		// AC-1a straddle: message just before activation, row just after.
		s.message("s1", "tc-straddle", k.Add(-time.Millisecond))
		s.row("s1", "exec-1", "tc-straddle", "live", k.Add(time.Millisecond))
		r := s.eval()
		require.Equal(t, counts{health.Healthy, 0, 3, 0}, countsOf(r))
		require.Equal(t, instant.Format(k.Add(4*time.Second)), *r.LastObservedAt)
	})
}

// AC-28 / AC-21b: two messages describing one subagent collapse to one key.
func TestHealth_AC28_AC21b_DuplicateMessagesNoShortfall(t *testing.T) {
	eachActivated(t, func(t *testing.T, s *store) {
		s.message("s1", "tc-dup", k.Add(time.Second))
		s.message("s1", "tc-dup", k.Add(2*time.Second))
		s.row("s1", "exec-1", "tc-dup", "live", k.Add(time.Second))
		require.Equal(t, counts{health.Healthy, 0, 0, 0}, countsOf(s.eval()))
	})
}

// AC-28 / AC-2: messages the live path and the backfill skip (empty session
// id, task id or tool_call_id) produce no row and must not read as a shortfall;
// the excess side subtracts the widest message set, so a row whose message has
// an empty task_id column is accounted for.
func TestHealth_AC28_AC2SkippedMessagesNoFalseAlarm(t *testing.T) {
	eachActivated(t, func(t *testing.T, s *store) {
		s.session("")
		at := s.ts(k.Add(time.Second))
		s.captured("s1", "tc-ok", k.Add(time.Second))
		s.rawMessage("s1", "", subagentMeta("tc-empty-task"), at)
		s.rawMessage("s1", nil, subagentMeta("tc-null-task"), at)
		s.rawMessage("", "task-x", subagentMeta("tc-empty-session"), at)
		s.rawMessage("s1", "task-s1", subagentMeta(""), at)
		s.rawMessage("s1", "task-s1", `{"normalized":{"kind":"subagent_task"}}`, at) // no tool_call_id at all
		s.rawMessage("s1", "task-s1", `{"tool_call_id":null,"normalized":{"kind":"subagent_task"}}`, at)
		r := s.eval()
		require.Equal(t, counts{health.Healthy, 0, 0, 0}, countsOf(r))

		// Widest set on the excess side: this row's message has task_id ''.
		s.row("s1", "exec-1", "tc-empty-task", "live", k.Add(time.Second))
		require.Equal(t, counts{health.Healthy, 0, 0, 0}, countsOf(s.eval()), "excess must not mirror the identity filter")

		// Control: the same message shape with a task id IS expected.
		s.message("s1", "tc-qualifies", k.Add(time.Second))
		require.Equal(t, counts{health.Shortfall, 1, 0, 0}, countsOf(s.eval()))
	})
}

// AC-28 (revision 4) malformed metadata: NULL, ”, 'null', malformed text and
// non-object JSON are counts, not errors, on both dialects — including a
// truncated document that names subagent_task.
func TestHealth_AC28_MalformedMetadataIsCountedNotRaised(t *testing.T) {
	eachActivated(t, func(t *testing.T, s *store) {
		at := s.ts(k.Add(time.Second))
		for _, m := range []any{
			nil, "", "null", "{bad", "[1]", `"text"`, "42", "true", `{}`, `{"normalized":"subagent_task"}`,
			`{"tool_call_id":"tc-trunc","normalized":{"kind":"subagent_task"`,
			`{"tool_call_id":"tc-trail","normalized":{"kind":"subagent_task"}} x`,
			`[{"tool_call_id":"tc-arr","normalized":{"kind":"subagent_task"}}]`,
			`{"tool_call_id":"tc-nul","normalized":{"kind":"subagent_task"},"x":"\u0000"}`,
		} {
			s.rawMessage("s1", "task-s1", m, at)
		}
		s.captured("s1", "tc-ok", k.Add(time.Second))
		s.message("s1", "tc-missed", k.Add(2*time.Second))
		// A valid document spelling the kind with \u escapes still qualifies.
		s.rawMessage("s1", "task-s1", `{"tool_call_id":"tc-escaped","normalized":{"kind":"subagent\u005ftask"}}`, at)

		r := s.eval()
		// tc-missed, tc-escaped, and tc-nul: a \u0000 in a member health
		// does not read costs the message nothing on either dialect (jsonb
		// refuses the document; it is read as SQLite reads it, issue 22 §3).
		require.Equal(t, counts{health.Shortfall, 3, 0, 0}, countsOf(r))

		if s.db.Dialect == dialect.SQLite {
			// On PostgreSQL the floor casts every candidate and raises on the
			// malformed ones: it measures, it does not check.
			var n int64
			b, err := instant.NewBoundary(instant.Format(k))
			require.NoError(t, err)
			require.NoError(t, s.db.QueryRowContext(s.ctx, health.FloorQuery(s.db.Dialect), b.Arg()).Scan(&n))
			require.Equal(t, int64(4), n, "floor: every qualifying message")
		}
	})
}

// AC-28 / AC-19: the statements Queries returns parse and run verbatim on both
// dialects, with one bind value, and give Evaluate's numbers.
func TestHealth_AC28_AC19_QueriesRunVerbatim(t *testing.T) {
	eachActivated(t, func(t *testing.T, s *store) {
		s.captured("s1", "tc-a", k.Add(time.Second))
		s.row("s1", "exec-2", "tc-a", "live", k.Add(2*time.Second))
		s.row("s1", "exec-1", "tc-orphan", "live", k.Add(3*time.Second))
		s.message("s1", "tc-missed", k.Add(4*time.Second))
		r := s.eval()
		require.Equal(t, counts{health.Shortfall, 1, 1, 1}, countsOf(r))

		st := health.Queries(s.db.Dialect)
		b, err := instant.NewBoundary(*r.CaptureSince)
		require.NoError(t, err)
		for name, c := range map[string]struct {
			q    string
			want int64
		}{"shortfall": {st.Shortfall, 1}, "excess": {st.Excess, 1}, "collisions": {st.Collisions, 1}} {
			var n int64
			require.NoError(t, s.db.QueryRowContext(s.ctx, c.q, b.Arg()).Scan(&n), name)
			require.Equal(t, c.want, n, name)
		}
		var last sql.NullString
		require.NoError(t, s.db.QueryRowContext(s.ctx, st.LastObservedAt, b.Arg()).Scan(&last))
		v, err := instant.FromColumn(last.String)
		require.NoError(t, err)
		require.Equal(t, *r.LastObservedAt, v)
		require.Equal(t, instant.Format(k.Add(3*time.Second)), v)
	})
}

// AC-28 / AC-28b: Evaluate computes its four numbers in one statement over one
// scan; they equal what the normative statements Queries returns give when a
// monitor runs them one by one. Checked over a store grown at random through
// every shape the two anti-joins treat differently: identities missing or
// empty (shortfall side only), tool_call_ids that are not strings, malformed
// and non-subagent documents, duplicates, cross-execution reuse, orphan rows,
// and messages and rows either side of the one-microsecond boundary.
func TestHealth_AC28_EvaluateEqualsTheNormativeQueries(t *testing.T) {
	eachStore(t, func(t *testing.T, s *store) {
		s.session("s2")
		s.session("")
		s.activate(k)
		rng := rand.New(rand.NewSource(28))
		pick := func(xs ...any) any { return xs[rng.Intn(len(xs))] }
		when := func() time.Time {
			return pick(k.Add(-time.Microsecond), k, k.Add(-time.Hour), k.Add(time.Duration(rng.Intn(3600))*time.Second)).(time.Time)
		}
		st := health.Queries(s.db.Dialect)
		b, err := instant.NewBoundary(instant.Format(k))
		require.NoError(t, err)
		var seen counts
		for round := 0; round < 8; round++ {
			for i := 0; i < 12; i++ {
				tc := fmt.Sprintf("tc-%d", rng.Intn(10))
				sess := pick("s1", "s1", "s2", "").(string)
				meta := pick(subagentMeta(tc), subagentMeta(tc), subagentMeta(tc), subagentMeta(tc), subagentMeta(tc), subagentMeta(""), nil, "", "{bad",
					`{"tool_call_id":7,"normalized":{"kind":"subagent_task"}}`,
					`{"tool_call_id":"`+tc+`","normalized":{"kind":"subagent\u005ftask"}}`,
					`{"tool_call_id":"`+tc+`","normalized":{"kind":"tool_call"}}`)
				s.rawMessage(sess, pick("task-"+sess, "task-"+sess, "task-"+sess, "", nil), meta, s.ts(when()))
			}
			for i := 0; i < 4; i++ {
				s.n++
				s.exec(`INSERT INTO task_session_subagents (id, task_session_id, task_id, agent_execution_id, tool_call_id, source, observed_at, updated_at)
					VALUES (?, ?, 'task-x', ?, ?, 'live', ?, ?) ON CONFLICT DO NOTHING`,
					fmt.Sprintf("r%04d", s.n), pick("s1", "s2").(string), pick("exec-1", "exec-2", "unknown").(string),
					fmt.Sprintf("tc-%d", rng.Intn(12)), s.ts(when()), s.ts(when()))
			}

			r := s.eval()
			want := map[string]int64{}
			for name, q := range map[string]string{"shortfall": st.Shortfall, "excess": st.Excess, "collisions": st.Collisions} {
				var n int64
				require.NoError(t, s.db.QueryRowContext(s.ctx, q, b.Arg()).Scan(&n), name)
				want[name] = n
			}
			require.Equal(t, want, map[string]int64{"shortfall": *r.Shortfall, "excess": *r.Excess, "collisions": *r.Collisions}, "round %d", round)
			var last sql.NullString
			require.NoError(t, s.db.QueryRowContext(s.ctx, st.LastObservedAt, b.Arg()).Scan(&last))
			if !last.Valid {
				require.Nil(t, r.LastObservedAt, "round %d", round)
			} else {
				v, err := instant.FromColumn(last.String)
				require.NoError(t, err)
				require.Equal(t, v, *r.LastObservedAt, "round %d", round)
			}
			seen.Shortfall += want["shortfall"]
			seen.Excess += want["excess"]
			seen.Collisions += want["collisions"]
		}
		require.Positive(t, seen.Shortfall, "the store must exercise the shortfall")
		require.Positive(t, seen.Excess, "the store must exercise the excess")
		require.Positive(t, seen.Collisions, "the store must exercise collisions")
	})
}

// Missing tables are errors that say which.
func TestHealth_MissingTablesAreNamed(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		_, err := health.Evaluate(ctx, db.DB)
		require.ErrorIs(t, err, health.ErrMissingTables)
		require.ErrorContains(t, err, "kandev_meta")

		s := newStore(t, db)
		s.activate(k)
		s.exec(`DROP TABLE task_session_subagents`)
		_, err = health.Evaluate(ctx, db.DB)
		require.ErrorIs(t, err, health.ErrMissingTables)
		require.ErrorContains(t, err, "task_session_subagents")
		require.NotContains(t, err.Error(), "task_session_messages")
	})
}

// A dialect other than the two is refused before anything is read: it does
// not take SQLite's statements.
func TestHealth_UnknownDialectIsAnError(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		_, err := health.Evaluate(context.Background(), db.DB, health.WithDialect("mysql"))
		require.ErrorContains(t, err, `unsupported dialect "mysql"`)
		require.Panics(t, func() { health.Queries("mysql") })
		require.Panics(t, func() { health.FloorQuery("mysql") })
	})
}

// BenchmarkHealth compares one full health evaluation with the floor — one
// scan of the qualifying-message predicate with the same normalization, the
// least work any correct check does — on a seeded store shaped like the
// reference store: 253 subagent invocations across 38 sessions, the rest
// ordinary message history (SCHEMASTATE_BENCH_MESSAGES, default 20000).
// The evaluate line's x_floor metric is the ratio.
//
//	go test -run '^$' -bench BenchmarkHealth ./health/
func BenchmarkHealth(b *testing.B) {
	n := 20000
	if v, err := strconv.Atoi(os.Getenv("SCHEMASTATE_BENCH_MESSAGES")); err == nil && v > 0 {
		n = v
	}
	for _, d := range []dialect.Dialect{dialect.SQLite, dialect.Postgres} {
		b.Run(string(d), func(b *testing.B) {
			db := dbtest.Open(b, d)
			ctx := context.Background()
			seedBench(b, ctx, db, n)
			bound, err := instant.NewBoundary(instant.Format(k))
			require.NoError(b, err)

			var floorPerOp time.Duration
			b.Run("floor", func(b *testing.B) {
				q := health.FloorQuery(d)
				for i := 0; i < b.N; i++ {
					var c int64
					if err := db.QueryRowContext(ctx, q, bound.Arg()).Scan(&c); err != nil {
						b.Fatal(err)
					}
				}
				floorPerOp = b.Elapsed() / time.Duration(b.N)
			})
			b.Run("evaluate", func(b *testing.B) {
				var r *health.Report
				for i := 0; i < b.N; i++ {
					var err error
					if r, err = health.Evaluate(ctx, db.DB); err != nil {
						b.Fatal(err)
					}
				}
				if floorPerOp > 0 {
					b.ReportMetric(float64(b.Elapsed()/time.Duration(b.N))/float64(floorPerOp), "x_floor")
				}
				if r.Verdict != health.Shortfall || *r.Shortfall != 3 || *r.Excess != 2 || *r.Collisions != 1 {
					b.Fatalf("seeded store evaluated to %+v", countsOf(r))
				}
			})
		})
	}
}

// seedBench is BenchmarkHealth's store: the reference store's 253 subagent
// invocations across 38 sessions among n messages of ordinary history around
// k, each captured, then three missed writes, two orphan rows and one
// cross-execution reuse.
func seedBench(b *testing.B, ctx context.Context, db *dbtest.DB, n int) {
	b.Helper()
	declared(b, db)
	tx, err := db.BeginTx(ctx, nil)
	require.NoError(b, err)
	exec := func(q string, args ...any) {
		if _, err := tx.ExecContext(ctx, db.Q(q), args...); err != nil {
			b.Fatal(err)
		}
	}
	exec(`DELETE FROM kandev_meta`)
	exec(`INSERT INTO kandev_meta (key, value) VALUES (?, ?)`, keys.CaptureSince, instant.Format(k))
	for s := 0; s < 38; s++ {
		exec(`INSERT INTO task_sessions (id, task_id) VALUES (?, ?)`, fmt.Sprintf("s%02d", s), fmt.Sprintf("task-%02d", s))
	}
	msg, err := tx.PrepareContext(ctx, db.Q(`INSERT INTO task_session_messages (id, task_session_id, task_id, turn_id, content, metadata, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`))
	require.NoError(b, err)
	row, err := tx.PrepareContext(ctx, db.Q(`INSERT INTO task_session_subagents (id, task_session_id, task_id, agent_execution_id, tool_call_id, source, observed_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`))
	require.NoError(b, err)
	// History spans the activation instant: a quarter before, the rest after.
	at := func(i, of int) any {
		return instant.RowTime(db.Dialect, k.Add(time.Duration(i-of/4)*time.Second))
	}
	content := "Ordinary agent output: reading files, running tests, summarising the diff for the reviewer."
	for i := 0; i < n; i++ {
		sess := fmt.Sprintf("s%02d", i%38)
		meta := fmt.Sprintf(`{"tool_call_id":"toolu_%06d","status":"completed","normalized":{"kind":"tool_execute","tool_execute":{"command":"go test ./...","exit_code":0,"output":"ok  \tgithub.com/x/y\t0.41s"}}}`, i)
		switch i % 10 {
		case 0:
			meta = `{"usage":{"input_tokens":1204,"output_tokens":88},"model":"claude-opus-5[1m]","note":"a \u003cb\u003e tag, escaped by json.Marshal"}`
		case 1:
			meta = "{}"
		}
		if _, err := msg.ExecContext(ctx, fmt.Sprintf("m%06d", i), sess, "task-"+sess[1:], "turn-1", content, meta, at(i, n), at(i, n)); err != nil {
			b.Fatal(err)
		}
	}
	// 253 subagent invocations, spread through the same window, each captured;
	// then three missed writes, two orphan rows and one cross-execution reuse.
	for i := 0; i < 253; i++ {
		sess := fmt.Sprintf("s%02d", i%38)
		tc := fmt.Sprintf("toolu_sub_%03d", i)
		when := at(i*n/253, n)
		if _, err := msg.ExecContext(ctx, fmt.Sprintf("sub%03d", i), sess, "task-"+sess[1:], "turn-1", content, subagentMeta(tc), when, when); err != nil {
			b.Fatal(err)
		}
		if _, err := row.ExecContext(ctx, fmt.Sprintf("row%03d", i), sess, "task-"+sess[1:], "exec-1", tc, "live", when, when); err != nil {
			b.Fatal(err)
		}
	}
	late := instant.RowTime(db.Dialect, k.Add(time.Duration(n)*time.Second))
	for i := 0; i < 3; i++ {
		if _, err := msg.ExecContext(ctx, fmt.Sprintf("missed%d", i), "s01", "task-01", "turn-1", content, subagentMeta(fmt.Sprintf("toolu_missed_%d", i)), late, late); err != nil {
			b.Fatal(err)
		}
	}
	for i, tc := range []string{"toolu_orphan_0", "toolu_orphan_1"} {
		if _, err := row.ExecContext(ctx, fmt.Sprintf("orphan%d", i), "s01", "task-01", "exec-1", tc, "live", late, late); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := row.ExecContext(ctx, "reuse", "s24", "task-24", "exec-2", "toolu_sub_252", "live", late, late); err != nil {
		b.Fatal(err)
	}
	require.NoError(b, tx.Commit())
	if db.Dialect == dialect.Postgres {
		_, err = db.ExecContext(ctx, `ANALYZE task_session_messages; ANALYZE task_session_subagents`)
		require.NoError(b, err)
	}
}
