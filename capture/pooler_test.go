package capture_test

import (
	"context"
	"database/sql"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/capture"
	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/dbtest"
	"github.com/schemastate/schemastate/internal/pgbouncer"
)

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
	w := capture.NewWriter(db, dialect.Postgres, capture.WithLogger(slog.New(slog.DiscardHandler)))
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
	w := capture.NewWriter(client(), dialect.Postgres, capture.WithLogger(slog.New(slog.NewJSONHandler(lb, nil))),
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
	replica := capture.NewWriter(client(), dialect.Postgres, capture.WithLogger(slog.New(slog.DiscardHandler)))
	defer replica.Close()
	require.NoError(t, replica.Record(ctx, frame("toolu_r1", at(0))))
	leftover, err := client().PrepareContext(ctx, replica.UpsertSQL())
	require.NoError(t, err)
	defer leftover.Close()

	w := capture.NewWriter(client(), dialect.Postgres, capture.WithLogger(slog.New(slog.DiscardHandler)),
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
	require.ErrorContains(t, err, "agent_execution_id")
	require.ErrorContains(t, err, "cannot take the upsert")
}
