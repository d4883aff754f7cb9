package reconcile

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/schemastate/schemastate/dialect"
)

// PostgreSQL: the lock is a session advisory lock taken on the same pinned
// connection that runs every step, so the lock can never starve the
// reconcile's own transactions. Each step is its own transaction with a
// lock_timeout: ALTER TABLE … ADD CONSTRAINT holds ACCESS EXCLUSIVE, and a
// waiting ALTER queues every later reader behind it, so the wait is bounded
// and a timeout fails the step (rolled back, retried next boot).
//
// Session advisory locks do not survive a transaction-mode connection pooler
// (the session is not the client's); point the reconcile at the server or at
// a session-mode pool.
//
// The certificate is checked before the lock is taken, so a steady-state boot
// never waits for another replica's reconcile; a boot with work takes the
// lock and checks again under it.

type pgSession struct {
	conn   *sql.Conn
	db     *sql.DB // for progress reports while conn builds an index
	pid    int     // conn's backend
	schema string  // current_schema(), where the reconcile works
	ident  string  // database.schema, named when the lock is not acquired
	key    int64
	locked bool
	tx     *sql.Tx
	o      *options
}

func openPostgres(ctx context.Context, db *sql.DB, o *options) (*pgSession, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	s := &pgSession{conn: conn, db: db, o: o}
	var database string
	if err := conn.QueryRowContext(ctx, `SELECT current_database(), current_schema(), pg_backend_pid()`).Scan(&database, &s.schema, &s.pid); err != nil {
		conn.Close()
		return nil, err
	}
	ident := database + "." + s.schema
	h := fnv.New64a()
	h.Write([]byte("schemastate/reconcile:" + ident))
	s.key, s.ident = int64(h.Sum64()), ident
	return s, nil
}

// lock takes the advisory lock, polling for up to the lock wait.
func (s *pgSession) lock(ctx context.Context) error {
	deadline := time.Now().Add(s.o.lockWait)
	for {
		var got bool
		if err := s.conn.QueryRowContext(ctx, `SELECT pg_try_advisory_lock($1)`, s.key).Scan(&got); err != nil {
			return err
		}
		if got {
			s.locked = true
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w on %s; gave up after %s", ErrLockHeld, s.ident, s.o.lockWait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (s *pgSession) querier() dialect.Querier { return s.conn }

func (s *pgSession) schemaName() string { return s.schema }

func (s *pgSession) begin(ctx context.Context, step string) (dialect.Querier, error) {
	tx, err := s.conn.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	if _, err := tx.ExecContext(ctx, fmt.Sprintf("SET LOCAL lock_timeout = '%dms'", s.o.ddlLockTimeout.Milliseconds())); err != nil {
		tx.Rollback()
		return nil, err
	}
	s.tx = tx
	return tx, nil
}

func (s *pgSession) end(ctx context.Context, ok bool) error {
	tx := s.tx
	s.tx = nil
	if !ok {
		return tx.Rollback()
	}
	return tx.Commit()
}

// close releases the lock. Every step has already committed or rolled back
// in its own transaction, so nothing here can undo a step: a failed unlock is
// not a step failure. The connection is then discarded rather than returned to
// the pool — the server drops a session's advisory locks with the session, so
// the lock can never outlive this reconcile on a pooled connection.
func (s *pgSession) close(ctx context.Context) error {
	s.unlock()
	return nil
}

func (s *pgSession) abort() {
	if s.tx != nil {
		s.tx.Rollback()
	}
	s.unlock()
}

func (s *pgSession) unlock() {
	if !s.locked {
		s.conn.Close()
		return
	}
	if _, err := s.conn.ExecContext(context.Background(), `SELECT pg_advisory_unlock($1)`, s.key); err != nil {
		s.o.logger.Warn("reconcile lock: unlock failed; connection discarded, which releases the lock", "error", err)
		_ = s.conn.Raw(func(any) error { return sqldriver.ErrBadConn })
	}
	s.conn.Close()
}
