package bench

import (
	"context"
	"sync"
	"time"

	"github.com/schemastate/schemastate/internal/tool/bench/render"
	"github.com/schemastate/schemastate/reconcile"
)

// lock runs one more, untimed, reconcile of the legacy store of n rows with
// a pg_locks poller and a concurrent reader on other connections. It is not
// part of the timed runs: polling and reading load the server. The online
// upgrade's own benchmark (reader and writer waits against the naive single
// ALTER) is a separate measurement.
func (b *bench) lock(ctx context.Context, rep *render.Report, n int) error {
	if err := b.restoreLegacy(ctx); err != nil {
		return err
	}
	w, err := b.watch(ctx)
	if err != nil {
		return err
	}
	r, err := reconcile.Reconcile(ctx, b.db, reconcile.WithLogger(b.quiet))
	held, worst, reads, poll := w.stop()
	if err != nil && (r == nil || r.Err() == nil || ctx.Err() != nil) {
		return err
	}
	if err != nil {
		rep.Locks = append(rep.Locks, render.Lock{Rows: n, Held: held, ReaderWorst: worst, ReaderQueries: reads, PollInterval: poll, Err: render.OneLine(err.Error(), 300)})
		return nil
	}
	base, err := b.readerBaseline(ctx, reads)
	if err != nil {
		return err
	}
	rep.Locks = append(rep.Locks, render.Lock{Rows: n, Held: held, ReaderWorst: worst, ReaderBaseline: base, ReaderQueries: reads, PollInterval: poll})
	return nil
}

// watcher polls pg_locks for an ACCESS EXCLUSIVE lock on the subagents table
// on one connection and runs a reader's SELECT in a loop on another.
type watcher struct {
	cancel      context.CancelFunc
	wg          sync.WaitGroup
	first, last time.Time
	polls       int
	pollStart   time.Time
	worst       time.Duration
	reads       int
}

func (b *bench) watch(ctx context.Context) (*watcher, error) {
	var rel uint32
	if err := b.db.QueryRowContext(ctx, `SELECT 'task_session_subagents'::regclass::oid`).Scan(&rel); err != nil {
		return nil, err
	}
	var session string
	if err := b.db.QueryRowContext(ctx, `SELECT task_session_id FROM task_session_subagents LIMIT 1`).Scan(&session); err != nil {
		return nil, err
	}
	pollConn, err := b.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	readConn, err := b.db.Conn(ctx)
	if err != nil {
		pollConn.Close()
		return nil, err
	}
	wctx, cancel := context.WithCancel(ctx)
	w := &watcher{cancel: cancel, pollStart: time.Now()}
	w.wg.Add(2)
	go func() {
		defer w.wg.Done()
		defer pollConn.Close()
		for wctx.Err() == nil {
			var held bool
			err := pollConn.QueryRowContext(wctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE relation = $1 AND mode = 'AccessExclusiveLock' AND granted)`, rel).Scan(&held)
			now := time.Now()
			if err != nil {
				return
			}
			w.polls++
			if held {
				if w.first.IsZero() {
					w.first = now
				}
				w.last = now
			}
		}
	}()
	go func() {
		defer w.wg.Done()
		defer readConn.Close()
		for wctx.Err() == nil {
			t0 := time.Now()
			var n int
			if err := readConn.QueryRowContext(wctx, `SELECT COUNT(*) FROM task_session_subagents WHERE task_session_id = $1`, session).Scan(&n); err != nil {
				return
			}
			w.worst = max(w.worst, time.Since(t0))
			w.reads++
		}
	}()
	return w, nil
}

// stop ends both loops and returns the lock's observed hold (first to last
// sample that saw it, plus one poll interval), the reader's worst latency,
// its query count and the poll interval.
func (w *watcher) stop() (held, worst time.Duration, reads int, poll time.Duration) {
	end := time.Now()
	w.cancel()
	w.wg.Wait()
	if w.polls > 0 {
		poll = end.Sub(w.pollStart) / time.Duration(w.polls)
	}
	if !w.first.IsZero() {
		held = w.last.Sub(w.first) + poll
	}
	return held, w.worst, w.reads, poll
}

// readerBaseline is the reader's worst latency over n SELECTs with nothing
// else running: what the reader's worst would be without the reconcile.
func (b *bench) readerBaseline(ctx context.Context, n int) (time.Duration, error) {
	var session string
	if err := b.db.QueryRowContext(ctx, `SELECT task_session_id FROM task_session_subagents LIMIT 1`).Scan(&session); err != nil {
		return 0, err
	}
	conn, err := b.db.Conn(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	var worst time.Duration
	for i := 0; i < max(n, 100); i++ {
		t0 := time.Now()
		var c int
		if err := conn.QueryRowContext(ctx, `SELECT COUNT(*) FROM task_session_subagents WHERE task_session_id = $1`, session).Scan(&c); err != nil {
			return 0, err
		}
		worst = max(worst, time.Since(t0))
	}
	return worst, nil
}
