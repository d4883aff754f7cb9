package capture

import (
	"context"
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// transient reports whether a failed upsert may succeed if sent again: the
// database or the connection to it failed, not the frame. Sending the frame
// again is safe even when the first attempt's outcome is unknown, because
// the upsert is idempotent (every merge rule is in its conflict clause).
//
// The caller's own cancellation is never transient.
func transient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	// SQLite: the write lock still held after the busy timeout, a locked
	// shared-cache table, a brief I/O error (any extended IOERR code).
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_IOERR:
			return true
		}
		return false
	}
	// PostgreSQL: serialization failure and deadlock (the transaction was
	// rolled back), the backend terminated or the server shutting down or
	// starting, any connection exception (class 08).
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "40001", "40P01", "57P01", "57P02", "57P03":
			return true
		}
		return strings.HasPrefix(pe.Code, "08")
	}
	// A dropped connection: database/sql takes a new one from the pool on the
	// next attempt.
	var ne net.Error
	var ce *pgconn.ConnectError
	return errors.Is(err, driver.ErrBadConn) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, net.ErrClosed) || errors.As(err, &ne) || errors.As(err, &ce) || pgconn.SafeToRetry(err)
}
