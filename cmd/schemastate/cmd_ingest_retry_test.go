package main

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
)

// Ingest outwaits a lost write: a SQLite lock held past the busy timeout,
// a PostgreSQL backend terminated between frames.

// scriptedInput hands ingest one line per Read and runs before(i) before
// line i is handed over, so a test can act between two frames' writes.
type scriptedInput struct {
	lines  []string
	next   int
	before func(i int)
}

func (s *scriptedInput) Read(p []byte) (int, error) {
	if s.next == len(s.lines) {
		return 0, io.EOF
	}
	if s.before != nil {
		s.before(s.next)
	}
	l := s.lines[s.next] + "\n"
	if len(p) < len(l) {
		return 0, io.ErrShortBuffer
	}
	s.next++
	return copy(p, l), nil
}

func retryFrames(n int) []string {
	var lines []string
	for i := range n {
		lines = append(lines, fmt.Sprintf(`{"session_id":"s1","task_id":"t1","tool_call_id":"tc-%d","subagent_task":{}}`, i))
	}
	return lines
}

// A SQLite write lock taken between two frames and held past the busy
// timeout of ingest's connection (50 ms here; 10 s by default): the frame
// that meets it is retried, every frame persists, exit 0 (before: that frame
// failed, exit 2). The hold is the condition under test — a lock that
// outlasts the busy timeout — so it is a duration, six times the timeout;
// Retried == 1 fails the test if the frame did not outwait it.
func TestIngest_SQLiteLockHeldPastBusyTimeoutLosesNothing(t *testing.T) {
	const busy = 50 * time.Millisecond
	db := dbtest.Open(t, dialect.SQLite)
	sessionStore(t, db, map[string]string{"s1": "t1"})
	holder, err := sql.Open("sqlite", db.DSN)
	require.NoError(t, err)
	defer holder.Close()
	released := make(chan struct{})
	in := &scriptedInput{lines: retryFrames(6), before: func(i int) {
		if i != 3 {
			return
		}
		conn, err := holder.Conn(context.Background())
		require.NoError(t, err)
		_, err = conn.ExecContext(context.Background(), `BEGIN IMMEDIATE`)
		require.NoError(t, err)
		time.AfterFunc(6*busy, func() {
			defer close(released)
			_, _ = conn.ExecContext(context.Background(), `COMMIT`)
			conn.Close()
		})
	}}
	var out, errb bytes.Buffer
	args := []string{"ingest", "--db", db.CLIDSN, "--json"}
	e := newEnv(args, in, &out, &errb)
	e.sqliteBusy = busy
	code := e.run(context.Background(), args)
	<-released
	require.Equal(t, exitOK, code, errb.String())
	s := decodeSummary(t, out.String())
	require.Equal(t, int64(6), s.Persisted)
	require.Equal(t, int64(1), s.Retried)
	require.Zero(t, s.Failed)
	var n int
	require.NoError(t, db.DB.QueryRow(`SELECT COUNT(*) FROM task_session_subagents`).Scan(&n))
	require.Equal(t, 6, n)
}

// pg_terminate_backend of ingest's connection between two frames: the next
// frame meets the terminated backend (57P01), is retried on a new connection,
// every frame persists, exit 0 (before: that frame failed, exit 2).
func TestIngest_BackendTerminatedLosesNothing(t *testing.T) {
	db := dbtest.Open(t, dialect.Postgres)
	sessionStore(t, db, map[string]string{"s1": "t1"})
	// The test's own schema in the name: a run of the same test elsewhere on
	// the server is not terminated with this one.
	app := "ingest-terminated-" + db.Schema
	dsn := dbtest.WithParam(t, db.CLIDSN, "application_name", app)
	terminated := 0
	in := &scriptedInput{lines: retryFrames(8), before: func(i int) {
		if i != 4 {
			return
		}
		require.NoError(t, db.DB.QueryRow(`SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&terminated))
		require.Eventually(t, func() bool {
			var n int
			require.NoError(t, db.DB.QueryRow(`SELECT COUNT(*) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&n))
			return n == 0
		}, 5*time.Second, 5*time.Millisecond)
	}}
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"ingest", "--db", dsn, "--json"}, in, &out, &errb)
	require.Equal(t, exitOK, code, errb.String())
	require.Positive(t, terminated)
	s := decodeSummary(t, out.String())
	require.Equal(t, int64(8), s.Persisted)
	require.Equal(t, int64(1), s.Retried)
	var n int
	require.NoError(t, db.DB.QueryRow(`SELECT COUNT(*) FROM task_session_subagents`).Scan(&n))
	require.Equal(t, 8, n)
}
