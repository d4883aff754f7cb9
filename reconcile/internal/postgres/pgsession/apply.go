package pgsession

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/hooks"
	"github.com/schemastate/schemastate/internal/ops"
	"github.com/schemastate/schemastate/reconcile/internal/core"
	"github.com/schemastate/schemastate/reconcile/internal/postgres/pgsql"
)

// Applying a PostgreSQL plan, phase by phase, with lock discipline.
//
// A DDL statement that waits for its table lock sits in the lock queue, and
// every later reader of the table queues behind it: a short exclusive lock
// becomes an outage when a host transaction holds the table. So every
// statement that takes a table lock runs under a short lock_timeout (the
// attempt, withDDLLockAttempt) and is retried with exponential backoff and
// jitter until the budget (withDDLLockTimeout) is spent; then the phase fails,
// naming the sessions that hold the table, and the step is retried next boot.

// transact runs fn in one transaction whose lock waits end after the
// attempt timeout, retried whole (fn from the start) until it gets its locks
// or the budget is spent (withLockRetry).
func (s *Session) Transact(ctx context.Context, _ string, table string, fn func(q core.Querier) error) error {
	return s.withLockRetry(ctx, table, func(timeout time.Duration) error {
		return s.inTx(ctx, timeout, budgetCatalog, func(tx *sql.Tx) error { return fn(tx) })
	})
}

// alone applies a non-transactional phase: the batched copy, or CREATE or
// DROP INDEX CONCURRENTLY.
func (s *Session) Alone(ctx context.Context, ph ops.Phase, h core.PhaseHooks) error {
	run, ok := runners[ph.Kind]
	if !ok {
		return fmt.Errorf("%s: no runner for a phase of kind %q", ph.ID(), ph.Kind)
	}
	return run(s, ctx, ph, h)
}

// runners are the runners of the non-transactional phases, by kind.
var runners = map[ops.Kind]func(*Session, context.Context, ops.Phase, core.PhaseHooks) error{
	ops.KindBatched:       (*Session).copyBatches,
	ops.KindRebuildCopy:   (*Session).rebuildCopy,
	ops.KindRebuildReplay: (*Session).replayLog,
	ops.KindRebuildIndex:  (*Session).rebuildIndexes,
	ops.KindConcurrent:    (*Session).concurrently,
	ops.KindCheckRows:     (*Session).checkRows,
	ops.KindOwnTx:         (*Session).ownTx,
}

// inTx runs fn in one transaction whose lock waits end after timeout and
// whose statements end after the budget of kind (SET LOCAL, whatever the
// session's statement_timeout).
func (s *Session) inTx(ctx context.Context, timeout time.Duration, kind stmtKind, fn func(*sql.Tx) error) error {
	tx, err := s.conn.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := setLocalTimeouts(ctx, tx, timeout, stmtBudget(s.o, kind)); err != nil {
		tx.Rollback()
		return err
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

// concurrently runs a non-transactional phase (CREATE or DROP INDEX
// CONCURRENTLY). Their SHARE UPDATE EXCLUSIVE lock never blocks readers or
// writers, so they wait for it — and for the transactions the build must
// outlast — in one attempt of up to withConcurrentWait. A failure part way runs
// the phase's Cleanup (the INVALID index it left) before it is reported.
//
// The wait is bounded on the client side (boundWait), not by a session
// lock_timeout: a statement outside a transaction has no SET LOCAL, and a
// session SET … RESET pair can land on two server connections behind a
// transaction-mode pooler, leaving the setting on another client's.
func (s *Session) concurrently(ctx context.Context, ph ops.Phase, h core.PhaseHooks) error {
	for _, stmt := range ph.SQL {
		stop := s.watchIndexBuild(ctx, ph, h.Progress)
		tag := statementTag()
		waited, release := s.boundWait(ctx, tag)
		_, err := s.conn.ExecContext(ctx, tag+stmt)
		release()
		stop()
		if err == nil {
			h.Executed(stmt)
		}
		if err != nil && waited() {
			err = fmt.Errorf("%w: %s: waited %s%s: %w", ops.ErrLockNotAcquired, ph.Table, s.o.ConcurrentWait, s.holders(ctx, ph.Table), err)
		}
		if err != nil {
			err = fmt.Errorf("%s: %w", core.FirstLine(stmt), pgsql.WithDetail(err))
			if dup := s.duplicates(ctx, err, ph); dup != "" {
				err = fmt.Errorf("%w; duplicated keys: %s", err, dup)
			}
			for _, c := range ph.Cleanup {
				cctx := context.WithoutCancel(ctx)
				tag := statementTag()
				_, release := s.boundWait(cctx, tag)
				_, cerr := s.conn.ExecContext(cctx, tag+c)
				release()
				if cerr != nil {
					err = fmt.Errorf("%w (cleanup %s: %v)", err, c, cerr)
				}
			}
			return err
		}
	}
	return nil
}

// statementTag begins a statement the reconcile runs outside a
// transaction: a comment unique to that run of it, by which boundWait finds
// the backend running it. The tag travels with the statement to whichever
// server connection runs it, behind a transaction-mode pooler too (where a
// pg_backend_pid() read before the statement may name another server
// connection: the pooler picks one per statement, and CREATE INDEX
// CONCURRENTLY cannot share a round trip with the read, since a
// multi-statement query string is a transaction block). It sits at the
// head of the text, so track_activity_query_size (100 bytes at the least)
// never cuts it, however long the statement; and it is no other
// database's, nor another statement's of the same text.
func statementTag() string {
	return fmt.Sprintf("/* schemastate %016x */ ", rand.Uint64())
}

// copyBatches runs a batched phase (the column copy's shadow columns, a
// fill): SQL[0] in short transactions, one range of pages at a time, over
// the pages the table had when the phase began. Rows written since are the
// trigger's (the copy) or get the default (a fill). A batch skips rows
// already done, so a resumed phase rewrites nothing twice. The phase ends
// by checking every row (DoneWhen); a row the host updated meanwhile may
// have moved to a page already covered, so the whole table is passed over
// again, a few times at most, until it holds (a pass writes only the rows
// still to do).
func (s *Session) copyBatches(ctx context.Context, ph ops.Phase, h core.PhaseHooks) error {
	pages, err := s.pages(ctx, ph.Table)
	if err != nil {
		return err
	}
	most := int64(max(s.o.CopyBatchPages, 1))
	batch := most
	verb := "copying"
	if ph.Name == ops.PhaseFill {
		verb = "filling"
	}
	var rows int64
	for from := int64(0); from < pages; {
		if err := s.o.OverBudget(); err != nil {
			return err
		}
		began := time.Now()
		n, err := s.batch(ctx, ph, from, from+batch)
		if err != nil {
			return fmt.Errorf("batch of pages %d–%d: %w", from, from+batch, err)
		}
		took := time.Since(began)
		if from == 0 {
			h.Executed(ph.Loop.Batch)
		}
		rows, from = rows+n, from+batch
		h.Progress(fmt.Sprintf("%s %s: %d rows copied, page %d of %d", verb, ph.Table, rows, min(from, pages), pages))
		if err := h.Fail(hooks.FailpointCopyBatch); err != nil {
			return err
		}
		if rest := time.Duration(float64(took) * s.o.CopyPause); rest > 0 && from < pages {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(rest):
			}
		}
		batch = nextBatch(batch, most, took)
	}
	rows, err = s.tailPasses(ctx, ph, h, verb, batch, rows)
	if err != nil {
		return err
	}
	h.Progress(fmt.Sprintf("copied %s: %d rows", ph.Table, rows))
	return nil
}

// tailPasses passes over the table again, in batches of batch pages, until
// the phase's DoneWhen holds, for the rows the host moved while the first
// pass ran; at most maxTailPasses. It returns rows, the rows written so
// far, with those it wrote.
func (s *Session) tailPasses(ctx context.Context, ph ops.Phase, h core.PhaseHooks, verb string, batch, rows int64) (int64, error) {
	for tail := 0; ; tail++ {
		var done bool
		if err := s.conn.QueryRowContext(ctx, ph.DoneWhen).Scan(&done); err != nil {
			return rows, fmt.Errorf("check the batches: %w", err)
		}
		if done {
			return rows, nil
		}
		if tail == maxTailPasses {
			return rows, fmt.Errorf("batches incomplete: rows of %s still to do after %d passes (%d rows written)", ph.Table, tail+1, rows)
		}
		now, err := s.pages(ctx, ph.Table)
		if err != nil {
			return rows, err
		}
		for from := int64(0); from < now; from += batch {
			n, err := s.batch(ctx, ph, from, from+batch)
			if err != nil {
				return rows, fmt.Errorf("batch of pages %d–%d: %w", from, from+batch, err)
			}
			rows += n
		}
		h.Progress(fmt.Sprintf("%s %s: %d rows, pass %d over %d pages for the rows the host moved meanwhile", verb, ph.Table, rows, tail+2, now))
	}
}

// batchTarget is how long one batch of a batched phase should hold its row
// locks: a host writer that updates a row of the batch waits for at most
// about that long.
const batchTarget = 50 * time.Millisecond

// nextBatch sizes the next batch from how long the last took: fewer pages
// when it held its locks past twice batchTarget, more (up to most, the
// withCopyBatchPages ceiling) when it was under half of it. Never fewer
// than minBatchPages (or most, when that is smaller): a batch's commit has
// a cost of its own, and a table walked a page at a time pays it per page.
func nextBatch(batch, most int64, took time.Duration) int64 {
	switch {
	case took > 2*batchTarget:
		batch = int64(float64(batch) * float64(batchTarget) / float64(took))
	case took < batchTarget/2:
		batch *= 2
	}
	return min(most, max(batch, minBatchPages))
}

// minBatchPages is the fewest pages nextBatch gives a batch.
const minBatchPages = 16

// maxTailPasses bounds the passes a batched phase makes after its first.
const maxTailPasses = 5

// pages is the table's size in pages.
func (s *Session) pages(ctx context.Context, table string) (int64, error) {
	var pages int64
	err := s.conn.QueryRowContext(ctx, `SELECT pg_relation_size(to_regclass($1)) / current_setting('block_size')::int`,
		pgsql.Qualified(s.schema, table)).Scan(&pages)
	return pages, err
}

// batch runs a batched phase's statement over the pages [from, to) in a
// short transaction under the lock discipline, and says how many rows it
// wrote.
func (s *Session) batch(ctx context.Context, ph ops.Phase, from, to int64) (int64, error) {
	var rows int64
	err := s.withLockRetry(ctx, ph.Table, func(timeout time.Duration) error {
		return s.inTx(ctx, timeout, budgetBatch, func(tx *sql.Tx) error {
			res, err := tx.ExecContext(ctx, ph.Loop.Batch, fmt.Sprintf("(%d,0)", from), fmt.Sprintf("(%d,0)", to))
			if err != nil {
				return pgsql.WithDetail(err)
			}
			rows, _ = res.RowsAffected()
			return nil
		})
	})
	return rows, err
}

// withLockRetry runs attempt until it succeeds, fails for another reason
// than a lock timeout, or the budget is spent. Each attempt waits at most
// the attempt timeout for its locks; between attempts it backs off
// exponentially with jitter, so replicas and the host's own DDL interleave.
func (s *Session) withLockRetry(ctx context.Context, table string, attempt func(timeout time.Duration) error) error {
	budget := s.o.DDLLockTimeout
	per := min(s.o.DDLLockAttempt, budget)
	deadline := time.Now().Add(budget)
	wait := 20 * time.Millisecond
	for n := 1; ; n++ {
		err := attempt(per)
		if err == nil || !isLockTimeout(err) {
			return err
		}
		if time.Now().Add(wait / 2).After(deadline) {
			return fmt.Errorf("%w: %s after %d attempts in %s (each waited at most %s)%s: %w",
				ops.ErrLockNotAcquired, table, n, budget, per, s.holders(ctx, table), err)
		}
		sleep := wait/2 + rand.N(wait)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(min(sleep, time.Until(deadline))):
		}
		wait = min(2*wait, time.Second)
	}
}

func isLockTimeout(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "55P03" // lock_not_available
}

// holders names the other sessions holding a lock on the table (or, when
// none does, the database's oldest open transaction, which a concurrent
// index build waits for: it waits for no other database's).
func (s *Session) holders(ctx context.Context, table string) string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	list, err := core.QueryStrings(ctx, s.conn, `SELECT format('pid %s (%s, %s, transaction open %s s: %s)', a.pid, l.mode, a.state,
  round(extract(epoch FROM now() - a.xact_start)::numeric, 1), left(regexp_replace(a.query, '\s+', ' ', 'g'), 60))
 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
 WHERE l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) AND l.relation = to_regclass($1)
   AND l.granted AND l.pid <> pg_backend_pid() ORDER BY a.xact_start LIMIT 5`, pgsql.Qualified(s.schema, table))
	if err == nil && len(list) == 0 {
		list, err = core.QueryStrings(ctx, s.conn, `SELECT format('pid %s (oldest open transaction, %s, open %s s: %s)', pid, state,
  round(extract(epoch FROM now() - xact_start)::numeric, 1), left(regexp_replace(query, '\s+', ' ', 'g'), 60))
 FROM pg_stat_activity WHERE xact_start IS NOT NULL AND pid <> pg_backend_pid() AND backend_type = 'client backend'
   AND datname = current_database() AND pid <> $1
 ORDER BY xact_start LIMIT 1`, s.lockPID)
	}
	if err != nil || len(list) == 0 {
		return ""
	}
	return "; held by " + strings.Join(list, ", ")
}

// duplicates names up to five keys that made a unique build fail.
func (s *Session) duplicates(ctx context.Context, err error, ph ops.Phase) string {
	var pe *pgconn.PgError
	if ph.Name != ops.PhaseBuildIndex || !errors.As(err, &pe) || pe.Code != "23505" {
		return ""
	}
	if len(ph.Key) == 0 {
		return ""
	}
	quoted := make([]string, len(ph.Key))
	for i, c := range ph.Key {
		quoted[i] = dialect.QuoteIdent(c)
	}
	cols := strings.Join(quoted, ", ")
	list, qerr := core.QueryStrings(context.WithoutCancel(ctx), s.conn, fmt.Sprintf(`SELECT format('(%%s) × %%s', concat_ws(', ', %s), count(*))
 FROM %s GROUP BY %s HAVING count(*) > 1 LIMIT 5`, cols, pgsql.Qualified(s.schema, ph.Table), cols))
	if qerr != nil {
		return ""
	}
	return strings.Join(list, "; ")
}
