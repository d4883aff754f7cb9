package reconcile

import (
	"ariga.io/atlas/sql/postgres"
	"ariga.io/atlas/sql/schema"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

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
			return fmt.Errorf("another reconcile holds the lock on %s; gave up after %s", s.ident, s.o.lockWait)
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
		_ = s.conn.Raw(func(any) error { return driver.ErrBadConn })
	}
	s.conn.Close()
}

// withDetail appends PostgreSQL's DETAIL and HINT to err: they name the
// object that blocked a statement (the view that reads a column, say), which
// the error message alone does not.
func withDetail(err error) error {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || (pe.Detail == "" && pe.Hint == "") {
		return err
	}
	extra := pe.Detail
	if pe.Hint != "" {
		extra = strings.TrimSpace(extra + " " + pe.Hint)
	}
	return fmt.Errorf("%w: %s", err, extra)
}

// renameEquivalentUniques finds, on PostgreSQL, a live UNIQUE constraint that
// is a declared one under another name — the host's own DDL leaves the
// three-column key auto-named — and plans a RENAME CONSTRAINT instead of the
// drop and re-add a name-based diff would plan (which rebuilds the unique
// index under an ACCESS EXCLUSIVE lock). The live table is updated to the
// declared name so the diff sees the same constraint. A partial index, a
// plain unique index and a column order that differs are never equivalent.
func renameEquivalentUniques(d dialect.Dialect, schemaName string, live, want *schema.Table, deferrable map[string]bool) []string {
	if d != dialect.Postgres {
		return nil
	}
	var stmts []string
	for _, idx := range live.Indexes {
		if !isUniqueConstraint(idx) || deferrable[idx.Name] {
			continue
		}
		if _, declared := want.Index(idx.Name); declared {
			continue
		}
		for _, w := range want.Indexes {
			if _, taken := live.Index(w.Name); taken || !w.Unique || !sameColumns(idx, w) || hasPredicate(idx) {
				continue
			}
			stmts = append(stmts, fmt.Sprintf("ALTER TABLE %s.%s RENAME CONSTRAINT %s TO %s",
				dialect.QuoteIdent(schemaName), dialect.QuoteIdent(live.Name), dialect.QuoteIdent(idx.Name), dialect.QuoteIdent(w.Name)))
			idx.Name = w.Name
			idx.Attrs = append([]schema.Attr(nil), w.Attrs...)
			break
		}
	}
	return stmts
}

func isUniqueConstraint(idx *schema.Index) bool {
	for _, a := range idx.Attrs {
		if c, ok := a.(*postgres.Constraint); ok && c.T == "u" {
			return idx.Unique
		}
	}
	return false
}

func hasPredicate(idx *schema.Index) bool {
	for _, a := range idx.Attrs {
		if _, ok := a.(*postgres.IndexPredicate); ok {
			return true
		}
	}
	return false
}

// dropDeferrableUniques removes DEFERRABLE unique constraints from an
// inspected PostgreSQL table before the end state is observed. Atlas does not
// model deferrability, and INSERT … ON CONFLICT cannot use a deferrable
// constraint as its arbiter, so such a constraint is not AC-33 clause 2: the
// live upsert would fail against it, and execution_since must not be published.
func dropDeferrableUniques(ctx context.Context, d dialect.Dialect, q dialect.Querier, live *schema.Table) error {
	if d != dialect.Postgres || live == nil {
		return nil
	}
	deferrable, err := deferrableUniques(ctx, q, live.Name)
	if err != nil {
		return err
	}
	kept := live.Indexes[:0:0]
	for _, idx := range live.Indexes {
		if !deferrable[idx.Name] {
			kept = append(kept, idx)
		}
	}
	live.Indexes = kept
	return nil
}

// replaceDeferrableKeys plans, on PostgreSQL, replacing a declared unique
// constraint that is live but DEFERRABLE: it is not the declared key (no ON
// CONFLICT arbiter, see dropDeferrableUniques), yet Atlas's diff, blind to
// deferrability, sees no change, and every boot would observe the end state
// missing and change nothing. The constraint is removed from the live table,
// so the diff adds the declared one, and dropped first by the returned
// statement, in the same transaction. Returns the names of every deferrable
// unique, so renameEquivalentUniques never adopts one.
func replaceDeferrableKeys(ctx context.Context, d dialect.Dialect, q dialect.Querier, schemaName string, live, want *schema.Table) ([]string, map[string]bool, error) {
	if d != dialect.Postgres {
		return nil, nil, nil
	}
	deferrable, err := deferrableUniques(ctx, q, live.Name)
	if err != nil {
		return nil, nil, err
	}
	var stmts []string
	kept := live.Indexes[:0:0]
	for _, idx := range live.Indexes {
		if _, declared := want.Index(idx.Name); declared && deferrable[idx.Name] {
			stmts = append(stmts, fmt.Sprintf("ALTER TABLE %s.%s DROP CONSTRAINT %s",
				dialect.QuoteIdent(schemaName), dialect.QuoteIdent(live.Name), dialect.QuoteIdent(idx.Name)))
			continue
		}
		kept = append(kept, idx)
	}
	live.Indexes = kept
	return stmts, deferrable, nil
}

func deferrableUniques(ctx context.Context, q dialect.Querier, table string) (map[string]bool, error) {
	rows, err := q.QueryContext(ctx, `SELECT con.conname FROM pg_constraint con
  JOIN pg_class c ON c.oid = con.conrelid JOIN pg_namespace n ON n.oid = c.relnamespace
  WHERE n.nspname = current_schema() AND c.relname = $1 AND con.contype = 'u' AND con.condeferrable`, table)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	deferrable := map[string]bool{}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, err
		}
		deferrable[name] = true
	}
	return deferrable, rows.Err()
}
