package capture_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/capture"
	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/internal/testkit/pgbouncer"
)

// lockedSQLite is a SQLite store with a writer (opts) whose busy timeout is
// busyMS, and the store file's write lock held by another connection for
// hold (holdSQLiteLock: released closes when it goes, release lets it go).
func lockedSQLite(t *testing.T, busyMS int, hold time.Duration, opts ...capture.Option) (s *store, w *capture.Writer, released <-chan struct{}, release func()) {
	t.Helper()
	db := dbtest.Open(t, dialect.SQLite)
	s = newStore(t, db)
	w = writer(t, sqliteWithBusyTimeout(t, db, busyMS), db.Dialect, append([]capture.Option{s.logger()}, opts...)...)
	released, release = holdSQLiteLock(t, db, hold)
	return s, w, released, release
}

// A SQLite write lock held 2 s past the busy timeout: eight concurrent
// Records wait it out through retries and every frame persists (before, each
// was counted failed and lost when the busy timeout ran out).
func TestRecord_RetriesThroughSQLiteLockHeldPastBusyTimeout(t *testing.T) {
	const busy = 300
	s, w, released, _ := lockedSQLite(t, busy, busy*time.Millisecond+2*time.Second)
	errs := recordAll(w, numbered(8))
	<-released
	for _, err := range errs {
		require.NoError(t, err)
	}
	c := w.Counters()
	require.Equal(t, int64(8), c.Attempted)
	require.Equal(t, int64(8), c.Persisted)
	require.Zero(t, c.Failed)
	require.Positive(t, c.Retried, "the lock outlasted the busy timeout: some frame needed a second attempt")
	require.Equal(t, c.Attempted, c.SkippedNoIdentity+c.Persisted+c.Failed)
	require.Equal(t, 8, s.count(t, "1 = 1"))
	for _, r := range s.log.records(t) {
		require.NotEqual(t, "WARN", r["level"], r)
	}
}

// The live path's retries are bounded by the policy's budget: with the lock
// held far longer and attempts that would never run out, Record gives up when
// its budget is spent, counts the frame failed (and retried), and returns
// while the lock is still held — only the budget can have ended it (without
// it, Record waits the lock out and succeeds).
func TestRecord_RetryBudgetBoundsTheLivePath(t *testing.T) {
	s, w, released, release := lockedSQLite(t, 200, time.Minute,
		capture.WithRetry(capture.RetryPolicy{Attempts: 1 << 20, Budget: 1500 * time.Millisecond}))
	err := w.Record(context.Background(), frame("toolu_1", at(0)))
	require.Error(t, err)
	select {
	case <-released:
		t.Fatal("Record returned only when the lock went, not within its budget")
	default:
	}
	release()
	<-released
	require.Equal(t, capture.Counters{Attempted: 1, Failed: 1, Retried: 1}, w.Counters())
	var warn map[string]any
	for _, r := range s.log.records(t) {
		if r["level"] == "WARN" {
			warn = r
		}
	}
	require.NotNil(t, warn)
	require.Greater(t, warn["attempts"], float64(1))
}

// PostgreSQL serialization failures (40001) and deadlocks (40P01) raised by
// the server are retried: concurrent Records all persist, and retried counts
// the frames that needed it.
func TestRecord_RetriesSerializationFailureAndDeadlock(t *testing.T) {
	db := dbtest.Open(t, dialect.Postgres)
	s := newStore(t, db)
	// The first six writes fail, alternating 40001 and 40P01; a sequence
	// counts them because it is not rolled back with the failing statement.
	for _, stmt := range []string{`CREATE SEQUENCE fail_seq`,
		`CREATE FUNCTION fail_first() RETURNS trigger LANGUAGE plpgsql AS $$
		DECLARE n bigint := nextval('fail_seq');
		BEGIN
			IF n <= 6 THEN
				IF n % 2 = 0 THEN RAISE EXCEPTION 'forced deadlock' USING ERRCODE = '40P01'; END IF;
				RAISE EXCEPTION 'forced serialization failure' USING ERRCODE = '40001';
			END IF;
			RETURN NEW;
		END $$`,
		`CREATE TRIGGER fail_first BEFORE INSERT ON task_session_subagents FOR EACH ROW EXECUTE FUNCTION fail_first()`,
	} {
		_, err := db.DB.Exec(stmt)
		require.NoError(t, err)
	}
	for _, err := range recordAll(s.w, numbered(4)) {
		require.NoError(t, err)
	}
	c := s.w.Counters()
	require.Equal(t, int64(4), c.Persisted)
	require.Zero(t, c.Failed)
	require.GreaterOrEqual(t, c.Retried, int64(2), "six failures over four frames of at most one attempt each... need retries")
	require.Equal(t, 4, s.count(t, "1 = 1"))
	var n int64
	require.NoError(t, db.DB.QueryRow(`SELECT last_value FROM fail_seq`).Scan(&n))
	require.Equal(t, int64(10), n, "4 successes after 6 failures: every failure was followed by another attempt")
}

// terminateBackends ends every backend of application name (from another
// connection) and waits until they are gone.
func terminateBackends(t *testing.T, admin *sql.DB, name string) {
	t.Helper()
	var n int
	require.NoError(t, admin.QueryRow(`SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1`, name).Scan(&n))
	require.Positive(t, n)
	require.Eventually(t, func() bool {
		require.NoError(t, admin.QueryRow(`SELECT COUNT(*) FROM pg_stat_activity WHERE application_name = $1`, name).Scan(&n))
		return n == 0
	}, 5*time.Second, 5*time.Millisecond)
}

// pg_terminate_backend of the writer's connection (57P01) while frames are
// flowing: the next Record gets a new connection from the pool and persists
// (before, it was counted failed and lost). database/sql pings a pooled
// connection only when it was last used over a second ago, so a busy
// writer's next statement is the one that meets the terminated backend.
func TestRecord_RetriesAfterBackendTerminated(t *testing.T) {
	db := dbtest.Open(t, dialect.Postgres)
	s := newStore(t, db)
	// The test's own schema in the name: a run of the same test elsewhere on
	// the server is not terminated with this one.
	app := "capture-terminated-" + db.Schema
	pool, err := sql.Open("pgx", dbtest.WithParam(t, db.DSN, "application_name", app))
	require.NoError(t, err)
	t.Cleanup(func() { pool.Close() })
	pool.SetMaxOpenConns(1)
	w := writer(t, pool, db.Dialect, s.logger())
	ctx := context.Background()
	require.NoError(t, w.Record(ctx, frame("toolu_1", at(0))))
	require.NoError(t, w.Record(ctx, frame("toolu_2", at(0))))
	terminateBackends(t, db.DB, app)
	require.NoError(t, w.Record(ctx, frame("toolu_3", at(0))))
	require.Equal(t, capture.Counters{Attempted: 3, Persisted: 3, Retried: 1}, w.Counters())
	require.Equal(t, 3, s.count(t, "1 = 1"))
}

// A host whose default isolation is serializable: concurrent frames for the
// same subagents make the server itself refuse some upserts with 40001
// (about a third of them here without retries). Retried, every frame
// persists and the rows hold every frame's merge.
func TestRecord_RetriesRealSerializationFailures(t *testing.T) {
	db := dbtest.Open(t, dialect.Postgres)
	s := newStore(t, db)
	pool, err := sql.Open("pgx", dbtest.WithParam(t, db.DSN, "default_transaction_isolation", "serializable"))
	require.NoError(t, err)
	t.Cleanup(func() { pool.Close() })
	w := writer(t, pool, db.Dialect, s.logger())

	const n = 48
	frames := make([]capture.Frame, n)
	for i := range frames {
		frames[i] = frame(fmt.Sprintf("toolu_%d", i%3), at(time.Duration(i)*time.Millisecond),
			func(f *capture.Frame) { f.Subagent.TotalTokens = int64(1000 + i) })
	}
	for _, err := range recordAll(w, frames) {
		require.NoError(t, err)
	}
	c := w.Counters()
	require.Equal(t, capture.Counters{Attempted: n, Persisted: n, Retried: c.Retried}, c)
	t.Logf("%d of %d frames retried", c.Retried, n)
	require.Len(t, s.rows(t, sessA), 3)
}

// Behind a transaction-mode pooler a frame may reach a server connection
// that lacks the upsert the writer prepared, or where another client
// prepared that name (statementLost in transient.go): the frame is sent
// again, unprepared, instead of being counted failed.

// behindPooler is a declared-shape store behind a transaction-mode PgBouncer
// with one server connection, so every client's statements run on that one
// server session, and a way to open clients through it in pgx's exec mode
// (the CLI's: no statement is named unless prepared explicitly).
func behindPooler(t *testing.T) (*store, func() *sql.DB) {
	t.Helper()
	p := pgbouncer.Start(t, pgbouncer.Options{Mode: pgbouncer.Transaction, PoolSize: 1})
	s := newStore(t, p.Direct)
	dsn := dbtest.WithParam(t, p.DSN, "default_query_exec_mode", "exec")
	return s, func() *sql.DB {
		db, err := sql.Open("pgx", dsn)
		require.NoError(t, err)
		t.Cleanup(func() { db.Close() })
		return db
	}
}

// preparedUpserts lists the names of the upserts prepared on the session db
// runs on.
func preparedUpserts(t *testing.T, db *sql.DB) []string {
	t.Helper()
	return dbtest.StringsFrom(t, db, `SELECT name FROM pg_prepared_statements WHERE statement LIKE 'INSERT INTO task_session_subagents%'`)
}

// On a direct connection the upsert stays prepared: one named statement,
// every frame through it.
func TestRecord_DirectKeepsTheUpsertPrepared(t *testing.T) {
	s := newStore(t, dbtest.Open(t, dialect.Postgres))
	db, err := sql.Open("pgx", s.DSN)
	require.NoError(t, err)
	defer db.Close()
	db.SetMaxOpenConns(1)
	w := writer(t, db, dialect.Postgres, capture.WithLogger(slog.New(slog.DiscardHandler)))
	defer w.Close()
	for i, tc := range []string{"toolu_d1", "toolu_d2", "toolu_d3"} {
		require.NoError(t, w.Record(context.Background(), frame(tc, at(time.Duration(i)*time.Millisecond))))
	}
	require.Len(t, preparedUpserts(t, db), 1)
}

// Behind a transaction-mode pooler the server connection a frame runs on may
// not hold the statement the writer prepared (26000): the frame is sent
// again at once, unprepared, and written; it is not counted failed. Later
// frames are sent unprepared: they neither prepare it again nor run a
// statement of that name.
func TestRecord_PreparedStatementLostBehindPoolerIsSentUnprepared(t *testing.T) {
	s, client := behindPooler(t)
	lb := &logBuffer{}
	// One attempt per frame: the unprepared send is not the transient retry.
	w := writer(t, client(), dialect.Postgres, capture.WithLogger(slog.New(slog.NewJSONHandler(lb, nil))),
		capture.WithRetry(capture.RetryPolicy{Attempts: 1}))
	defer w.Close()
	ctx := context.Background()
	require.NoError(t, w.Record(ctx, frame("toolu_p1", at(0))))
	other := client()
	names := preparedUpserts(t, other)
	require.Len(t, names, 1, "the upsert is prepared on the one server connection")

	// The server connection no longer holds it, as when the pooler hands
	// the writer's next transaction to another.
	_, err := other.Exec(`DEALLOCATE ALL`)
	require.NoError(t, err)
	require.NoError(t, w.Record(ctx, frame("toolu_p2", at(time.Millisecond))))
	require.Empty(t, preparedUpserts(t, other), "not prepared again")

	// Another client now holds a statement of its own under that name: a
	// frame that still ran the writer's named statement would run it
	// (and fail, binding 22 values to none).
	_, err = other.Exec(`PREPARE ` + names[0] + ` AS SELECT 1`)
	require.NoError(t, err)
	require.NoError(t, w.Record(ctx, frame("toolu_p3", at(2*time.Millisecond))))

	require.Equal(t, capture.Counters{Attempted: 3, Persisted: 3}, w.Counters())
	require.Empty(t, lb.records(t), "no WARN")
	require.Equal(t, 3, s.count(t, `task_session_id = ?`, sessA))
}

// Other clients of the server connection (other replicas) left the
// statements this writer prepares under the names it would use (42P05): a
// replica's Check whose release of its statement was sent to another server
// connection, a replica's writer still running. Check does not take that for
// the table's shape, and frames are written, unprepared from then on. A
// table that cannot take the upsert still fails Check.
func TestCheck_NameTakenBehindPoolerIsNotAShapeProblem(t *testing.T) {
	s, client := behindPooler(t)
	ctx := context.Background()
	replica := writer(t, client(), dialect.Postgres, capture.WithLogger(slog.New(slog.DiscardHandler)))
	defer replica.Close()
	require.NoError(t, replica.Record(ctx, frame("toolu_r1", at(0))))
	leftover, err := client().PrepareContext(ctx, replica.UpsertSQL())
	require.NoError(t, err)
	defer leftover.Close()

	w := writer(t, client(), dialect.Postgres, capture.WithLogger(slog.New(slog.DiscardHandler)),
		capture.WithRetry(capture.RetryPolicy{Attempts: 1}))
	defer w.Close()
	require.NoError(t, w.Check(ctx))
	require.NoError(t, w.Record(ctx, frame("toolu_r2", at(time.Millisecond))))
	// Once a name was taken, the writer prepares nothing again, even when
	// the names are free.
	require.NoError(t, replica.Close())
	require.NoError(t, leftover.Close())
	other := client()
	require.Empty(t, preparedUpserts(t, other))
	require.NoError(t, w.Record(ctx, frame("toolu_r3", at(2*time.Millisecond))))
	require.Empty(t, preparedUpserts(t, other))
	require.Equal(t, capture.Counters{Attempted: 2, Persisted: 2}, w.Counters())
	require.Equal(t, 3, s.count(t, `task_session_id = ?`, sessA))

	s.Exec(t, `ALTER TABLE task_session_subagents DROP COLUMN agent_execution_id`)
	err = w.Check(ctx)
	require.ErrorIs(t, err, capture.ErrIncompatibleTable)
	require.ErrorContains(t, err, "agent_execution_id")
}
