// Package pgsession is PostgreSQL's session (session.go: the advisory
// lock's transaction, a transaction per step or phase; timeout.go: the
// statement budgets and the preflight) and the runners of the phases it runs
// outside a transaction (apply.go, runners.go).
package pgsession

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/ops"
	"github.com/schemastate/schemastate/reconcile/internal/core"
)

// PostgreSQL: the lock is a transaction-level advisory lock
// (pg_try_advisory_xact_lock) held by a transaction of its own, on a
// connection of its own, open from the moment the lock is taken to the end
// of the reconcile; the steps run on another connection. A transaction is
// the one thing every pooler that allows transactions keeps on one server
// connection, so the lock excludes whether the host reaches PostgreSQL
// directly, through a session-mode pool or through a transaction-mode one
// (PgBouncer, Supabase's pooler, Neon's pooled endpoint), where a session
// advisory lock belongs to whichever server connection ran it. The lock
// ends with its transaction: released by its rollback, and by the server
// (or the pooler closing its server connection) when the process dies.
//
// The lock's transaction is READ COMMITTED and idle between its statements:
// it holds no snapshot then, so CREATE INDEX CONCURRENTLY, which waits for
// every transaction holding an older snapshot, does not wait for it (a
// REPEATABLE READ holder would hold its snapshot and block the build for the
// whole run). Before every phase and step the holder check asks the lock's
// own transaction whether it still holds the lock: a replica whose lock
// transaction was ended (its connection lost, the server's
// idle_in_transaction_session_timeout) stops with ErrLockLost before it runs
// anything more, rather than run beside the replica that took the lock next.
//
// Each step is its own transaction with a lock_timeout (SET LOCAL, so it
// ends with the transaction): ALTER TABLE … ADD CONSTRAINT holds ACCESS
// EXCLUSIVE, and a waiting ALTER queues every later reader behind it, so the
// wait is bounded and a timeout fails the step (rolled back, retried next
// boot). Nothing the reconcile sets outlives its transaction, so nothing is
// left on a server connection another client of the pool is handed next.
//
// A statement-mode pooler refuses a transaction of more than one statement:
// there the lock cannot be taken, exclusion cannot be guaranteed, and the
// lock step fails with ErrStatementPooler, naming the pooler.
//
// The certificate is checked before the lock is taken, so a steady-state boot
// never waits for another replica's reconcile; a boot with work takes the
// lock and checks again under it.

// LockAdvisoryXact names PostgreSQL's boot lock in Report.Lock: a
// transaction-level advisory lock held by a transaction of its own.
const LockAdvisoryXact = "advisory_xact"

// Session is PostgreSQL's core.Session.
type Session struct {
	conn   *sql.Conn
	db     *sql.DB // for the lock's connection and progress reports
	schema string  // current_schema(), where the reconcile works
	ident  string  // database.schema, named when the lock is not acquired
	key    int64
	// lockConn and lockTx hold the lock once taken: its transaction, open
	// until release.
	lockConn *sql.Conn
	lockTx   *sql.Tx
	// lockPID is the lock transaction's backend (a transaction stays on one
	// server connection), never named as what a phase waited for.
	lockPID int
	tx      *sql.Tx
	// restoreTimeout, once preflight lifted statement_timeout on conn, is
	// the statement that gives the connection back its own (release).
	restoreTimeout string
	o              *core.Config
}

// Open opens the session on a connection of db's own; the lock is taken by
// Lock. Its identity (the database and schema its lock is keyed to) is read
// with its first read, Meta's, or by Lock when no Meta came first: on a
// certified boot the identity costs no round trip of its own.
func Open(ctx context.Context, db *sql.DB, o *core.Config) (*Session, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	return &Session{conn: conn, db: db, o: o}, nil
}

// identify keys the session to database.schema, once.
func (s *Session) identify(database string, schema sql.NullString) error {
	if !schema.Valid {
		return errors.New("current_schema() is NULL: no schema on the connection's search_path exists")
	}
	s.schema = schema.String
	ident := database + "." + s.schema
	h := fnv.New64a()
	h.Write([]byte("schemastate/reconcile:" + ident))
	s.key, s.ident = int64(h.Sum64()), ident
	return nil
}

// readIdentity is the identity's read of its own, for a Lock no successful
// Meta came before.
func (s *Session) readIdentity(ctx context.Context) error {
	if s.ident != "" {
		return nil
	}
	var database string
	var schema sql.NullString
	if err := s.conn.QueryRowContext(ctx, `SELECT current_database(), current_schema()`).Scan(&database, &schema); err != nil {
		return err
	}
	return s.identify(database, schema)
}

// Meta reads the rows named. Until the session knows its identity, each
// row brings it too (a plain read of kandev_meta, as cheap to plan as one
// without it); when no row is there, Lock reads it alone.
func (s *Session) Meta(ctx context.Context, m *core.MetaRows) (map[string]string, error) {
	if s.ident != "" {
		rows, err := s.conn.QueryContext(ctx, m.Query(dialect.Postgres), m.Args...)
		if err != nil {
			return nil, err
		}
		return core.ScanMeta(rows)
	}
	rows, err := s.conn.QueryContext(ctx, `SELECT key, value, current_database(), current_schema() FROM kandev_meta WHERE key IN (`+core.Placeholders(dialect.Postgres, 1, len(m.Names))+`)`, m.Args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]string{}
	var key, value, database string
	var schema sql.NullString
	for rows.Next() {
		if err := rows.Scan(&key, &value, &database, &schema); err != nil {
			return nil, err
		}
		out[key] = value
	}
	if err := rows.Err(); err != nil || len(out) == 0 {
		return out, err
	}
	return out, s.identify(database, schema)
}

// lock takes the advisory lock in a transaction of its own, polling for up
// to the lock wait, and then takes the connection the steps run on.
//
// The first attempt runs on the connection the certificate was read on,
// which becomes the lock's. A replica that does not get the lock is a
// waiter, and a waiter holds no connection between attempts: each later
// attempt borrows one and, failing, discards it (closed, not returned to the
// pool). Behind a session-mode pooler an open client connection is a server
// connection, pool idle or not; were waiters to keep theirs, eight replicas
// on a pool of four would leave the holder no server connection for its
// steps, and every replica would wait out its lock wait.
func (s *Session) Lock(ctx context.Context) error {
	if err := s.readIdentity(ctx); err != nil {
		return err
	}
	if n := s.db.Stats().MaxOpenConnections; n == 1 {
		return fmt.Errorf("the pool allows one connection (SetMaxOpenConns(%d)); the reconcile's lock holds a transaction on a connection of its own beside the one its steps run on: allow at least two", n)
	}
	s.lockConn, s.conn = s.conn, nil
	deadline := time.Now().Add(s.o.LockWait)
	pause := 50 * time.Millisecond
	for {
		got, err := s.tryLock(ctx)
		if err != nil {
			return pooled(fmt.Errorf("take the lock on %s: %w", s.ident, err))
		}
		if got {
			break
		}
		discard(s.lockConn)
		s.lockConn = nil
		if pause == 50*time.Millisecond {
			s.o.Logger.Info("reconcile lock: another reconcile holds it; waiting", "lock", s.ident, "lock_wait", s.o.LockWait)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w on %s; gave up after %s", core.ErrLockHeld, s.ident, s.o.LockWait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(min(pause, time.Until(deadline)+time.Millisecond)):
		}
		pause = min(pause*3/2, 500*time.Millisecond)
		if s.lockConn, err = s.db.Conn(ctx); err != nil {
			return fmt.Errorf("open the lock's connection: %w", err)
		}
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("open the steps' connection: %w", err)
	}
	s.conn = conn
	return nil
}

// discard closes conn rather than return it to the pool.
func discard(conn *sql.Conn) {
	_ = conn.Raw(func(any) error { return sqldriver.ErrBadConn })
	conn.Close()
}

// tryLock is one attempt: a READ COMMITTED transaction that tries the lock
// and is kept when it got it, rolled back (and the rollback checked) when
// it did not.
func (s *Session) tryLock(ctx context.Context) (bool, error) {
	tx, err := s.lockConn.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return false, err
	}
	if err := setLocalTimeout(ctx, tx, stmtBudget(s.o, budgetCatalog)); err != nil {
		_ = tx.Rollback()
		return false, err
	}
	var got bool
	if err := tx.QueryRowContext(ctx, `SELECT pg_try_advisory_xact_lock($1), pg_backend_pid()`, s.key).Scan(&got, &s.lockPID); err != nil {
		_ = tx.Rollback()
		return false, err
	}
	if !got {
		if err := tx.Rollback(); err != nil {
			return false, fmt.Errorf("end the attempt's transaction: %w", err)
		}
		return false, nil
	}
	s.lockTx = tx
	if err := s.idle(ctx); err != nil {
		return false, err
	}
	return true, nil
}

// idle leaves the lock's transaction holding no snapshot. Over the extended
// protocol (pgx's modes, most drivers' parameterized queries) a SELECT's
// portal stays open, holding the snapshot it ran under, until the next
// statement replaces it or the transaction ends: an idle READ COMMITTED
// transaction whose last statement was a SELECT still has an xmin, and
// CREATE INDEX CONCURRENTLY waits for it — for the whole run, since that
// transaction is the lock. A SET LOCAL takes no snapshot and replaces the
// portal, so after it the transaction waits with no xmin. The one it sets
// is of use too: the server's idle_in_transaction_session_timeout would end
// the lock's transaction (idle while a long phase runs on the other
// connection) part way through the run; it is switched off for this
// transaction alone. The lock still ends with its process: the server ends
// the transaction when the connection closes.
func (s *Session) idle(ctx context.Context) error {
	_, err := s.lockTx.ExecContext(ctx, `SET LOCAL idle_in_transaction_session_timeout = 0`)
	return err
}

// holding is the holder check: the lock's transaction is alive and holds
// the lock. It asks that transaction itself, so behind any pooler it is the
// server connection the lock lives on that answers.
func (s *Session) Holding(ctx context.Context) error {
	if s.lockTx == nil {
		return nil
	}
	var held bool
	err := s.lockTx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()
 AND granted AND classid::int8 = $1::int8 AND objid::int8 = $2::int8 AND objsubid = 1)`,
		int64(uint32(uint64(s.key)>>32)), int64(uint32(s.key))).Scan(&held)
	switch {
	case err != nil && ctx.Err() != nil:
		return err
	case err != nil:
		return fmt.Errorf("%w on %s: its transaction is gone: %w", ops.ErrLockLost, s.ident, pooled(err))
	case !held:
		return fmt.Errorf("%w on %s: its transaction no longer holds it", ops.ErrLockLost, s.ident)
	}
	if err := s.idle(ctx); err != nil {
		return fmt.Errorf("%w on %s: its transaction is gone: %w", ops.ErrLockLost, s.ident, err)
	}
	return nil
}

// pooled names a statement-mode pooler when err is its refusal of a
// transaction (PgBouncer: SQLSTATE 08P01, "transaction blocks not allowed
// in statement pooling mode").
func pooled(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && strings.Contains(pe.Message, "statement pooling") ||
		strings.Contains(err.Error(), "transaction blocks not allowed in statement pooling mode") {
		return fmt.Errorf("%w: it refused the transaction that holds the boot lock, so replicas could not exclude each other and nothing was changed; point the reconcile at the server, or at a transaction- or session-mode pool: %w", ops.ErrStatementPooler, err)
	}
	return err
}

func (s *Session) Querier() dialect.Querier { return s.conn }

func (s *Session) SchemaName() string { return s.schema }

func (s *Session) Begin(ctx context.Context, step string) (dialect.Querier, error) {
	tx, err := s.conn.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	// The backfill is one scan and one copy of the history (AC-23a): no
	// bound but the host's patience; execution_since writes one key.
	budget := stmtBudget(s.o, budgetCatalog)
	if step == core.StepBackfill {
		budget = stmtBudget(s.o, budgetScan)
	}
	if err := setLocalTimeouts(ctx, tx, s.o.DDLLockTimeout, budget); err != nil {
		tx.Rollback()
		return nil, err
	}
	s.tx = tx
	return tx, nil
}

func (s *Session) End(ctx context.Context, ok bool) error {
	tx := s.tx
	s.tx = nil
	if !ok {
		return tx.Rollback()
	}
	return tx.Commit()
}

// close releases the lock. Every step has already committed or rolled back
// in its own transaction, so nothing here can undo a step: a failed release
// is not a step failure.
func (s *Session) Close(context.Context) error {
	s.release()
	return nil
}

func (s *Session) Abort() {
	if s.tx != nil {
		s.tx.Rollback()
	}
	s.release()
}

// release ends the lock's transaction, which releases the lock, and checks
// that it ended. When the rollback fails the lock's connection is discarded
// rather than returned to the pool: closing it ends the transaction on the
// server (through a pooler: the pooler closes a server connection whose
// client left mid-transaction).
func (s *Session) release() {
	s.restoreSession()
	if s.conn != nil {
		defer s.conn.Close()
	}
	if s.lockConn == nil {
		return
	}
	if s.lockTx == nil {
		s.lockConn.Close()
		return
	}
	err := s.lockTx.Rollback()
	s.lockTx = nil
	if err == nil || errors.Is(err, sql.ErrTxDone) { // ErrTxDone: database/sql rolled it back when the reconcile's context ended
		s.lockConn.Close()
		return
	}
	s.o.Logger.Warn("reconcile lock: its transaction did not end cleanly; its connection is discarded, which ends it on the server", "lock", s.ident, "error", err)
	discard(s.lockConn)
}
