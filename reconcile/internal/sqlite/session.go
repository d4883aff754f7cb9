package sqlite

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/ops"
	"github.com/schemastate/schemastate/reconcile/internal/core"
)

// SQLite: the lock is SQLite's own write lock. The certificate is checked
// first, with no transaction and no lock: its two reads (the keys with the
// certificate, then the catalog) each take SQLite's shared lock for one
// statement, which a host writer's RESERVED lock (BEGIN IMMEDIATE) does not
// block, so a steady-state boot reads, finds nothing to do, and never waits
// behind a host writer. The two reads need no common snapshot: the keys are
// write-once and the certificate names the catalog it vouches for, so a
// catalog changed between them only fails the match and sends the boot to
// the full check. A certified boot runs nothing but those two statements:
// the connection's pragmas matter only to a reconcile that writes, so it
// neither reads nor sets them and hands the connection back exactly as it
// was lent. Only when there is work does lock switch the connection to the
// reconcile's settings and take the write lock, and the reconcile then runs
// on that one pinned connection inside one BEGIN IMMEDIATE transaction, each
// step inside a SAVEPOINT, so a failed step rolls back to exactly the state
// before it and a crash at any instant commits nothing. Foreign keys are
// switched off on that connection BEFORE the transaction (the pragma is a
// no-op inside one) and verified off: with them on, the rebuild's DROP TABLE
// would fire ON DELETE CASCADE in every referencing table and silently
// delete their rows. A connection whose settings cannot all be given back
// (or whose transaction cannot be ended) is closed rather than returned to
// the host's pool (release).
//
// The certificate's reads run under the host's own busy timeout. Should one
// meet a writer's commit lock (rollback journal) and fail, the boot takes
// the lock and runs the full check, which is always correct.

type session struct {
	conn *sql.Conn
	// lockWait is the busy timeout the write lock waits under.
	lockWait time.Duration
	// set records that lock changed the connection's pragmas; fkWasOn and
	// busyWas are the host's values, restored before the connection goes
	// back to its pool.
	set     bool
	fkWasOn bool
	busyWas int
	step    string
	// inTx: lock began the write transaction, which close commits.
	inTx bool
	// fail is the failpoint hook; logger the reconcile's.
	fail   func(point string) error
	logger *slog.Logger
	// bad says why the connection must not go back to the pool: a setting
	// that could not be restored, a transaction not rolled back (discard).
	bad error
}

// discard has release close the connection instead of handing it back to
// the host's pool (connDiscarder).
func (s *session) Discard(why error) { s.bad = errors.Join(s.bad, why) }

func open(ctx context.Context, db *sql.DB, o *core.Config) (*session, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	return &session{conn: conn, lockWait: o.LockWait, fail: o.Fail, logger: o.Logger}, nil
}

// holding: every step runs inside the transaction that holds the write
// lock, so a step cannot outlive the lock; a lost connection fails the step
// itself.
func (s *session) Holding(context.Context) error { return nil }

// lock switches foreign keys off (verified) and the busy timeout to the
// lock wait, and takes the write lock, waiting up to the lock wait.
func (s *session) Lock(ctx context.Context) error {
	if err := s.setPragmas(ctx); err != nil {
		return err
	}
	start := time.Now()
	if _, err := s.conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		err = fmt.Errorf("take the write lock (waited %s): %w", time.Since(start).Round(time.Millisecond), err)
		if busy(err) {
			return core.HeldError{Err: err}
		}
		return err
	}
	s.inTx = true
	return nil
}

// setPragmas records the host's foreign_keys and busy_timeout, then sets the
// reconcile's, outside any transaction.
func (s *session) setPragmas(ctx context.Context) error {
	var fk int
	if err := s.conn.QueryRowContext(ctx, "PRAGMA foreign_keys").Scan(&fk); err != nil {
		return fmt.Errorf("read foreign_keys on the reconcile connection: %w", err)
	}
	var busy int
	if err := s.conn.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&busy); err != nil {
		return fmt.Errorf("read busy_timeout on the reconcile connection: %w", err)
	}
	s.set, s.fkWasOn, s.busyWas = true, fk == 1, busy
	for _, stmt := range []string{
		"PRAGMA foreign_keys = OFF",
		fmt.Sprintf("PRAGMA busy_timeout = %d", s.lockWait.Milliseconds()),
	} {
		if _, err := s.conn.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("%s: %w", stmt, err)
		}
	}
	if err := s.conn.QueryRowContext(ctx, "PRAGMA foreign_keys").Scan(&fk); err != nil {
		return fmt.Errorf("could not read foreign_keys on the reconcile connection: %w", err)
	} else if fk != 0 {
		return fmt.Errorf("could not switch foreign keys off on the reconcile connection (foreign_keys=%d)", fk)
	}
	return nil
}

func (s *session) Querier() dialect.Querier { return s.conn }

func (s *session) SchemaName() string { return "main" }

// Meta reads the rows named; SQLite's session has nothing more to read.
func (s *session) Meta(ctx context.Context, m *core.MetaRows) (map[string]string, error) {
	rows, err := s.conn.QueryContext(ctx, m.Query(dialect.SQLite), m.Args...)
	if err != nil {
		return nil, err
	}
	return core.ScanMeta(rows)
}

func (s *session) Begin(ctx context.Context, step string) (dialect.Querier, error) {
	s.step = savepointName(step)
	if _, err := s.conn.ExecContext(ctx, "SAVEPOINT "+s.step); err != nil {
		return nil, err
	}
	return s.conn, nil
}

func (s *session) End(ctx context.Context, ok bool) error {
	if !ok {
		if _, err := s.conn.ExecContext(ctx, "ROLLBACK TO "+s.step); err != nil {
			return err
		}
	}
	_, err := s.conn.ExecContext(ctx, "RELEASE "+s.step)
	return err
}

// transact runs fn in a savepoint of the reconcile's one transaction: a
// failure rolls back to exactly the state before it. The write lock is
// already held, so there is nothing to retry.
func (s *session) Transact(ctx context.Context, step, _ string, fn func(q core.Querier) error) error {
	sp := savepointName(step)
	if _, err := s.conn.ExecContext(ctx, "SAVEPOINT "+sp); err != nil {
		return err
	}
	if err := fn(s.conn); err != nil {
		_, _ = s.conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK TO "+sp)
		_, _ = s.conn.ExecContext(context.WithoutCancel(ctx), "RELEASE "+sp)
		return err
	}
	_, err := s.conn.ExecContext(ctx, "RELEASE "+sp)
	return err
}

// alone: SQLite plans every phase inside its one transaction.
func (s *session) Alone(_ context.Context, ph ops.Phase, _ core.PhaseHooks) error {
	return fmt.Errorf("phase %s runs outside a transaction, which SQLite's plan never asks for", ph.ID())
}

func (s *session) Close(ctx context.Context) error {
	var err error
	if s.inTx {
		if _, err = s.conn.ExecContext(ctx, "COMMIT"); err != nil {
			s.rollback()
		}
	}
	s.release()
	return err
}

func (s *session) Abort() {
	if s.inTx {
		s.rollback()
	}
	s.release()
}

// rollback ends the write transaction; a connection it may have left inside
// one is discarded, not pooled.
func (s *session) rollback() {
	if _, err := s.conn.ExecContext(context.Background(), "ROLLBACK"); err != nil {
		s.Discard(fmt.Errorf("roll back the reconcile's transaction: %w", err))
	}
}

// release restores the host's pragmas, where lock changed them, and hands
// the connection back to its pool — unless a setting could not be restored
// (here, or by a phase: discard), when it closes the connection instead, so
// the pool never lends the host a connection with foreign keys off. A
// connection database/sql's Raw callback calls bad (driver.ErrBadConn) is
// closed, not pooled.
func (s *session) release() {
	if s.set {
		if s.fkWasOn {
			if err := core.RestoreSetting(s.conn, s.fail, s.logger, "PRAGMA foreign_keys", "PRAGMA foreign_keys = ON", "1"); err != nil {
				s.Discard(err)
			}
		}
		if err := core.RestoreSetting(s.conn, s.fail, s.logger, "PRAGMA busy_timeout", fmt.Sprintf("PRAGMA busy_timeout = %d", s.busyWas), strconv.Itoa(s.busyWas)); err != nil {
			s.Discard(err)
		}
	}
	if s.bad != nil {
		s.logger.Warn("reconcile connection closed, not returned to the host's pool", "error", s.bad)
		_ = s.conn.Raw(func(any) error { return sqldriver.ErrBadConn })
	}
	_ = s.conn.Close()
}

// busy reports SQLITE_BUSY: another connection holds the lock. (The
// driver's error is matched by its Code method: the library imports no
// database driver.)
func busy(err error) bool {
	var coded interface{ Code() int }
	return errors.As(err, &coded) && coded.Code()&0xff == 5
}

func savepointName(step string) string { return "schemastate_" + strings.ReplaceAll(step, "-", "_") }
