package capture

import (
	"context"
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// SQLite's primary result codes (sqlite3.h), which an extended code carries
// in its low byte.
const (
	sqliteBusy   = 5
	sqliteLocked = 6
	sqliteIOErr  = 10
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
	// The error is matched by its Code method (modernc's *sqlite.Error), so
	// this package does not import the driver, whose import registers it.
	var se interface{ Code() int }
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqliteBusy, sqliteLocked, sqliteIOErr:
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

// statementLost reports whether err is PostgreSQL's answer to a named
// prepared statement that is not the one the client thinks it prepared on
// that server connection: 26000 (invalid_sql_statement_name, it is not
// there) or 42P05 (duplicate_prepared_statement, another client of the
// server connection prepared that name). A transaction-mode pooler without
// prepared-statement tracking (PgBouncer before 1.21, or with
// max_prepared_statements = 0) hands one client's transactions to several
// server connections and several clients' to one. Neither the frame nor the
// table's shape is at fault.
func statementLost(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "26000" || pe.Code == "42P05")
}
