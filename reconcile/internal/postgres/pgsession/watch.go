package pgsession

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/schemastate/schemastate/internal/ops"
	"github.com/schemastate/schemastate/reconcile/internal/core"
	"github.com/schemastate/schemastate/reconcile/internal/postgres/pgsql"
)

// The watchers of a concurrent index build, each on a connection of the
// host's pool beside the build's: the client-side bound on its waits
// (boundWait) and its progress (watchIndexBuild).

// boundWait watches, from another pooled connection, the backend running
// the statement that begins with tag (statementTag), in this database, and
// cancels it (pg_cancel_backend, a statement any server connection can run)
// once it has waited for a lock — the table's, or a transaction the build
// must outlast — for longer than withConcurrentWait without a break: the
// bound lock_timeout put on each wait, kept by the client. The build itself
// runs as long as it needs. The cancel is sent only to a backend still
// running that statement, so a server connection a pooler has since handed
// to another client's statement is never cancelled. waited reports whether
// it cancelled the statement; release stops the watch.
func (s *Session) boundWait(ctx context.Context, tag string) (waited func() bool, release func()) {
	var cancelled atomic.Bool
	poll := min(max(s.o.ConcurrentWait/20, 10*time.Millisecond), 250*time.Millisecond)
	var since time.Time // the current wait began, as first seen
	const running = ` FROM pg_stat_activity WHERE datname = current_database() AND state = 'active'
 AND left(query, length($1)) = $1 AND pid <> pg_backend_pid()`
	release = core.OnEveryTick(ctx, poll, func(ctx context.Context) bool {
		var pid int
		var waiting bool
		err := s.pollRow(ctx, `SELECT pid, wait_event_type IS NOT DISTINCT FROM 'Lock'`+running+` LIMIT 1`, []any{tag}, &pid, &waiting)
		if err != nil || !waiting {
			since = time.Time{}
			return true
		}
		if since.IsZero() {
			since = time.Now().Add(-poll / 2)
			return true
		}
		if time.Since(since) < s.o.ConcurrentWait {
			return true
		}
		// Marked before the cancel is sent: the statement may fail of it,
		// and release end this watch, before the reply is read.
		cancelled.Store(true)
		var sent bool
		err = s.pollRow(ctx, `SELECT pg_cancel_backend(pid)`+running+` AND pid = $2`, []any{tag, pid}, &sent)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			cancelled.Store(false) // the statement ended meanwhile; nothing was sent
		case (err != nil || !sent) && ctx.Err() == nil:
			s.o.Logger.Warn("reconcile: could not cancel a concurrent index build past its wait", "pid", pid, "error", err)
		}
		return false
	})
	return cancelled.Load, release
}

// pollRow runs a watcher's one-row read (boundWait, watchIndexBuild) on a
// connection of the host's pool. The wait for the connection ends with ctx,
// which ends with the watch: a pool with none to lend (SetMaxOpenConns(2):
// the lock's and the steps') must not hold up the phase's end. The read
// itself runs under a context ctx's end does not reach, bounded by
// pollTimeout: pgx closes a connection whose statement's context ends
// mid-flight, and that would take one of the host's connections, with what
// the host SET on it, out of its pool.
func (s *Session) pollRow(ctx context.Context, query string, args []any, dest ...any) error {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pollTimeout)
	defer cancel()
	return conn.QueryRowContext(rctx, query, args...).Scan(dest...)
}

// pollTimeout bounds one watcher's read: a catalog view, read in
// milliseconds.
const pollTimeout = 5 * time.Second

// watchIndexBuild reports pg_stat_progress_create_index for the build on
// the phase's table while it runs, from another pooled connection.
func (s *Session) watchIndexBuild(ctx context.Context, ph ops.Phase, say func(string)) func() {
	if ph.Name != ops.PhaseBuildIndex || say == nil || s.db == nil {
		return func() {}
	}
	return core.OnEveryTick(ctx, 500*time.Millisecond, func(ctx context.Context) bool {
		var phase string
		var blocksDone, blocksTotal, tuplesDone, tuplesTotal int64
		err := s.pollRow(ctx, `SELECT phase, blocks_done, blocks_total, tuples_done, tuples_total
 FROM pg_stat_progress_create_index WHERE datname = current_database() AND relid = to_regclass($1) LIMIT 1`, []any{pgsql.Qualified(s.schema, ph.Table)}, &phase, &blocksDone, &blocksTotal, &tuplesDone, &tuplesTotal)
		if err != nil {
			return true
		}
		msg := fmt.Sprintf("building %s: %s", ph.Object, phase)
		switch {
		case blocksTotal > 0:
			msg += fmt.Sprintf(", blocks %d of %d", blocksDone, blocksTotal)
		case tuplesTotal > 0:
			msg += fmt.Sprintf(", tuples %d of %d", tuplesDone, tuplesTotal)
		}
		say(msg)
		return true
	})
}
