package pgsession

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/schemastate/schemastate/internal/hooks"
	"github.com/schemastate/schemastate/internal/ops"
	"github.com/schemastate/schemastate/reconcile/internal/core"
	"github.com/schemastate/schemastate/reconcile/internal/postgres/pgsql"
	"github.com/schemastate/schemastate/reconcile/internal/postgres/rebuild"
)

// flushAsWritten opens every transaction of the rebuild's copy and replay:
// the pages they dirty go to the kernel's writeback as the backend writes
// them out, every 256 kB, instead of piling up in the page cache until a
// checkpoint's fsync writes the new table's heap at once, with every host
// commit's WAL flush queued behind it (docs/benchmarks.md, "Where the
// writers' waits come from"). SET LOCAL: it ends with its transaction, so
// nothing stays on a pooled server connection, and any role may set it.
const flushAsWritten = "SET LOCAL backend_flush_after = '256kB'"

// rebuildCopy fills the new table, one range of pages per transaction, from
// where the state row says the copy is; each batch commits its rows and its
// progress together.
func (s *Session) rebuildCopy(ctx context.Context, ph ops.Phase, h core.PhaseHooks) error {
	qs := pgsql.Qualified(s.schema, rebuild.StateTable(ph.Table))
	var pages, next, rows int64
	if err := s.conn.QueryRowContext(ctx, "SELECT pages, next_page, rows FROM "+qs).Scan(&pages, &next, &rows); err != nil {
		return fmt.Errorf("read the copy's progress: %w", err)
	}
	batch := int64(max(s.o.CopyBatchPages, 1))
	first := true
	for from := next; from < pages; from += batch {
		if err := s.o.OverBudget(); err != nil {
			return err
		}
		to := min(from+batch, pages)
		// The holder check before every batch, as before every phase: a
		// replica that lost its lock part way through a long copy stops
		// before it writes another batch beside the replica that took it.
		if err := s.Holding(ctx); err != nil {
			return fmt.Errorf("before pages %d–%d (%d rows copied): %w", from, to, rows, err)
		}
		var n int64
		err := s.withLockRetry(ctx, ph.Table, func(timeout time.Duration) error {
			return s.inTx(ctx, timeout, budgetBatch, func(tx *sql.Tx) error {
				if _, err := tx.ExecContext(ctx, flushAsWritten); err != nil {
					return err
				}
				res, err := tx.ExecContext(ctx, ph.Loop.Batch, fmt.Sprintf("(%d,0)", from), fmt.Sprintf("(%d,0)", to))
				if err != nil {
					return pgsql.WithDetail(err)
				}
				n, _ = res.RowsAffected()
				if res, err = tx.ExecContext(ctx, ph.Loop.Progress, to, n); err != nil {
					return err
				}
				if k, _ := res.RowsAffected(); k == 0 {
					return rebuild.ErrSourceChanged
				}
				return nil
			})
		})
		rows += n
		if err != nil {
			return fmt.Errorf("copy pages %d–%d: %w", from, to, err)
		}
		if first {
			h.Executed(ph.Loop.Batch)
			h.Executed(ph.Loop.Progress)
			first = false
		}
		h.Progress(fmt.Sprintf("copying %s: %d rows copied, page %d of %d", ph.Table, rows, to, pages))
		if err := h.Fail(hooks.FailpointCopyBatch); err != nil {
			return err
		}
	}
	h.Progress(fmt.Sprintf("copied %s: %d rows", ph.Table, rows))
	return nil
}

// replayLog replays the log in chunks, each in one REPEATABLE READ
// transaction: the chunk's ids are deleted from the new table and copied
// again from the live one as that transaction's snapshot sees them, and only
// the log entries that snapshot saw are forgotten — an entry a writer commits
// meanwhile stays for the next chunk. It stops once a chunk finds the log
// short; the swap replays the rest under its lock.
//
// The replay after the copy (Object "copied") runs on the unindexed table,
// where every chunk's DELETE scans it whole. Its one duty there is to remove
// the duplicates the copy left, and every row the copy saw twice was logged
// before the copy ended: it replays up to the log's last entry as it begins
// and stops, leaving what writers log meanwhile to the indexed replay.
func (s *Session) replayLog(ctx context.Context, ph ops.Phase, h core.PhaseHooks) error {
	var total int64
	target := int64(-1) // no bound: replay until the log is short
	if ph.Object == "copied" {
		if err := s.conn.QueryRowContext(ctx, "SELECT coalesce(max(n), 0) FROM "+pgsql.Qualified(s.schema, rebuild.LogTable(ph.Table))).Scan(&target); err != nil {
			return fmt.Errorf("read the end of the log: %w", err)
		}
	}
	for round := 0; ; round++ {
		if err := s.o.OverBudget(); err != nil {
			return err
		}
		// The holder check before every chunk (see rebuildCopy).
		if err := s.Holding(ctx); err != nil {
			return fmt.Errorf("before replaying more (%d changed rows replayed): %w", total, err)
		}
		n, upTo, err := s.replayOnce(ctx, ph)
		if err != nil {
			return fmt.Errorf("replay the log: %w", err)
		}
		if round == 0 {
			for _, stmt := range ph.SQL {
				h.Executed(stmt)
			}
		}
		total += n
		if n > 0 {
			h.Progress(fmt.Sprintf("replaying %s: %d changed rows replayed", ph.Table, total))
			if err := h.Fail(hooks.FailpointReplayBatch); err != nil {
				return err
			}
		}
		if n < rebuild.ReplayShort || target >= 0 && upTo >= target {
			return nil
		}
	}
}

// replayOnce replays one chunk of the rebuild's log in a transaction of its
// own: n rows forgotten, up to entry upTo.
func (s *Session) replayOnce(ctx context.Context, ph ops.Phase) (n, upTo int64, err error) {
	tx, err := s.conn.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
	if err != nil {
		return 0, 0, err
	}
	defer tx.Rollback()
	if err := setLocalTimeout(ctx, tx, stmtBudget(s.o, budgetBatch)); err != nil {
		return 0, 0, err
	}
	if _, err := tx.ExecContext(ctx, flushAsWritten); err != nil {
		return 0, 0, err
	}
	// An empty log replays nothing: every statement still runs
	// (up to entry 0), so the phase runs the statements it prints.
	if err := tx.QueryRowContext(ctx, ph.Loop.Bound).Scan(&upTo); err != nil {
		return 0, 0, err
	}
	for _, stmt := range []string{ph.Loop.Delete, ph.Loop.Copy} {
		if _, err := tx.ExecContext(ctx, stmt, upTo); err != nil {
			return 0, 0, pgsql.WithDetail(err)
		}
	}
	res, err := tx.ExecContext(ctx, ph.Loop.Forget, upTo)
	if err != nil {
		return 0, 0, err
	}
	n, _ = res.RowsAffected()
	return n, upTo, tx.Commit()
}

// rebuildIndexConns is how many of the new table's indexes build at once:
// the table is private to the reconcile until the swap, so its builds wait
// for nothing and nobody waits for them. Two, measured on two cores under
// the host's traffic (docs/benchmarks.md): each build already sorts with
// its parallel workers, so more connections only queue for the same CPUs.
const rebuildIndexConns = 2

// rebuildIndexes builds the new table's indexes (every statement of the
// phase but the last, its ANALYZE) over up to rebuildIndexConns
// connections, each build in a transaction of its own — the steps'
// connection and others borrowed from the pool for the phase. Every build
// is CREATE INDEX IF NOT EXISTS, so a phase resumed after a crash skips
// what committed. The holder check runs before each build; the first error
// stops the others from starting and is the phase's.
func (s *Session) rebuildIndexes(ctx context.Context, ph ops.Phase, h core.PhaseHooks) error {
	builds, analyze := ph.Loop.Builds, ph.Loop.Analyze
	next := make(chan string, len(builds))
	for _, b := range builds {
		next <- b
	}
	close(next)
	// A failure stops the other worker from starting another build; the
	// one it is running finishes (or fails) on its own. It is not cancelled
	// (a plain errgroup.Group, no context): a statement cancelled mid-flight
	// can leave its connection unusable, and one of the two is the steps'
	// connection.
	var mu sync.Mutex // the lock's transaction is one connection: one check at a time; and the count
	var stopped atomic.Bool
	built := make(map[string]bool, len(builds))
	worker := func(conn *sql.Conn) error {
		for stmt := range next {
			if stopped.Load() || ctx.Err() != nil {
				return nil
			}
			if err := s.buildOne(ctx, conn, stmt, &mu, func() error {
				built[stmt] = true
				h.Progress(fmt.Sprintf("rebuilding %s: %d of %d indexes built", ph.Table, len(built), len(builds)))
				return h.Fail(hooks.FailpointRebuildIndexBuilt)
			}); err != nil {
				stopped.Store(true)
				return err
			}
		}
		return nil
	}
	err := s.onConns(ctx, len(builds), worker)
	// The builds finish in any order; the exec hook is told those that
	// committed in the plan's order, so what ran reads as the plan printed it.
	for _, b := range builds {
		if built[b] {
			h.Executed(b)
		}
	}
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	// In a transaction of its own, for its SET LOCAL statement_timeout.
	if err := buildIn(ctx, s.conn, analyze, stmtBudget(s.o, budgetScan)); err != nil {
		return fmt.Errorf("%s: %w", analyze, err)
	}
	h.Executed(analyze)
	return nil
}

// onConns runs worker on the steps' connection and on each further one, up
// to rebuildIndexConns in all and no more than n, the pool lends within a
// second, and waits for every run.
func (s *Session) onConns(ctx context.Context, n int, worker func(conn *sql.Conn) error) error {
	var g errgroup.Group
	for i := 1; i < min(rebuildIndexConns, n); i++ {
		// A pool with none to lend soon (SetMaxOpenConns(2): the lock's and
		// the steps') builds on the steps' connection alone.
		actx, cancel := context.WithTimeout(ctx, time.Second)
		conn, err := s.db.Conn(actx)
		cancel()
		if err != nil {
			break
		}
		g.Go(func() error {
			defer conn.Close()
			return worker(conn)
		})
	}
	g.Go(func() error { return worker(s.conn) })
	return g.Wait()
}

// buildOne checks the boot lock is still held, builds stmt on conn and,
// under mu, runs done (the count, the progress, the failpoint).
func (s *Session) buildOne(ctx context.Context, conn *sql.Conn, stmt string, mu *sync.Mutex, done func() error) error {
	mu.Lock()
	err := s.Holding(ctx)
	mu.Unlock()
	if err == nil {
		err = buildIn(ctx, conn, stmt, stmtBudget(s.o, budgetScan))
	}
	if err != nil {
		return fmt.Errorf("%s: %w", core.FirstLine(stmt), pgsql.WithDetail(err))
	}
	mu.Lock()
	defer mu.Unlock()
	return done()
}

// buildIn runs one index build (or the ANALYZE after them) in a
// transaction of its own on conn, under statement_timeout = budget.
func buildIn(ctx context.Context, conn *sql.Conn, stmt string, budget time.Duration) error {
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := setLocalTimeout(ctx, tx, budget); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, stmt); err != nil {
		return err
	}
	return tx.Commit()
}

// checkRows runs a check_rows phase: any row breaking the constraint fails
// it, by name, before the constraint is added. The read scans the table:
// it runs in a read-only transaction of its own, for its SET LOCAL
// statement_timeout.
func (s *Session) checkRows(ctx context.Context, ph ops.Phase, h core.PhaseHooks) error {
	h.Progress(fmt.Sprintf("checking %s: rows that break %s", ph.Table, ph.Constraint))
	tx, err := s.conn.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := setLocalTimeout(ctx, tx, stmtBudget(s.o, budgetScan)); err != nil {
		return err
	}
	if err := brokenRows(ctx, tx, ph); err != nil {
		return err
	}
	return tx.Commit()
}

// brokenRows fails with ErrRowsBreakConstraint when the phase's Breaking
// read finds rows.
func brokenRows(ctx context.Context, q core.Querier, ph ops.Phase) error {
	keys, err := core.QueryStrings(ctx, q, ph.Breaking.Sample)
	if err != nil {
		return fmt.Errorf("look for the rows that break %s: %w", ph.Constraint, err)
	}
	if len(keys) == 0 {
		return nil
	}
	var n int64
	if err := q.QueryRowContext(ctx, ph.Breaking.Count).Scan(&n); err != nil {
		return fmt.Errorf("count the rows that break %s: %w", ph.Constraint, err)
	}
	return fmt.Errorf("%w: %d rows of %s break %s (keys %s); nothing was added — correct or delete them, and the next boot tries again",
		ops.ErrRowsBreakConstraint, n, ph.Table, ph.Constraint, strings.Join(keys, ", "))
}

// ownTx runs an own_transaction phase (a VALIDATE): its SQL in one
// transaction of its own under the lock discipline. When it fails, Cleanup
// runs (dropping the NOT VALID constraint, which would otherwise keep
// rejecting the host's writes) and the rows that broke it are named.
func (s *Session) ownTx(ctx context.Context, ph ops.Phase, h core.PhaseHooks) error {
	h.Progress(fmt.Sprintf("validating %s: %s", ph.Table, ph.Constraint))
	err := s.withLockRetry(ctx, ph.Table, func(timeout time.Duration) error {
		return s.inTx(ctx, timeout, budgetScan, func(tx *sql.Tx) error {
			for _, stmt := range ph.SQL {
				if _, err := tx.ExecContext(ctx, stmt); err != nil {
					return fmt.Errorf("%s: %w", core.FirstLine(stmt), pgsql.WithDetail(err))
				}
			}
			return h.Fail(hooks.FailpointPhaseHeld(ph.ID()))
		})
	})
	if err == nil {
		for _, stmt := range ph.SQL {
			h.Executed(stmt)
		}
		return nil
	}
	cctx := context.WithoutCancel(ctx)
	if ph.Breaking != nil {
		if berr := brokenRows(cctx, s.conn, ph); berr != nil {
			err = fmt.Errorf("%w; %w", berr, err)
		}
	}
	for _, c := range ph.Cleanup {
		cerr := s.withLockRetry(cctx, ph.Table, func(timeout time.Duration) error {
			return s.inTx(cctx, timeout, budgetCatalog, func(tx *sql.Tx) error {
				_, err := tx.ExecContext(cctx, c)
				return err
			})
		})
		if cerr != nil {
			err = fmt.Errorf("%w (cleanup %s: %v)", err, c, cerr)
		}
	}
	return err
}
