// Package dsn reads the CLI's --db argument (a SQLite path or a PostgreSQL
// URL) into what sql.Open takes, with a display form safe to print, and
// opens it with errors that never repeat a password.
package dsn

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/perdialect"
	"github.com/schemastate/schemastate/internal/tool/redact"
)

// Target is a parsed --db argument.
type Target struct {
	Dialect dialect.Dialect
	// DriverName and DSN are what sql.Open takes.
	DriverName string
	DSN        string
	// Display is the DSN with any password removed, safe to print.
	Display string
	// Path is the SQLite file's path (empty on PostgreSQL).
	Path string

	// How a SQLite DSN is built: for reading only or for a new store, and
	// its busy timeout (0: DefaultBusyTimeout).
	form sqliteForm
	busy time.Duration
}

// ReadOnly is the target opened for reading only. On SQLite that is
// SQLiteReadOnlyDSN: the file is never created, written or switched to
// another journal mode. PostgreSQL is returned as it is.
func (t Target) ReadOnly() Target {
	t.form = formReadOnly
	return t.sqlite()
}

// NewStore is the target for a store schemastate creates itself (demo,
// generate, bench): on SQLite, SQLiteNewStoreDSN.
func (t Target) NewStore() Target {
	t.form = formNewStore
	return t.sqlite()
}

// WithBusyTimeout is the target with SQLite's busy timeout set to d
// (rounded down to the millisecond; 0 means DefaultBusyTimeout), whichever
// form it is opened in. PostgreSQL is returned as it is.
func (t Target) WithBusyTimeout(d time.Duration) Target {
	t.busy = d
	return t.sqlite()
}

// OnServer reports whether the target is a database on a server
// (PostgreSQL) rather than a file (SQLite). It panics on a target of neither
// dialect, which Parse never returns.
func (t Target) OnServer() bool { return onServer.Must(t.Dialect) }

var onServer = perdialect.Of[bool]{Postgres: true, SQLite: false}

// DefaultDSN is the CLI's default database: an embedded SQLite file in the
// working directory.
const DefaultDSN = "sqlite:kandev.db"

// Supported names the --db forms, for messages that refuse one.
const Supported = "sqlite:PATH, a plain file path (SQLite), or a postgres:// or postgresql:// URL"

// scheme matches a URL scheme followed by "//". A one-letter scheme is a
// Windows drive (C://…), read as a path.
var scheme = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9+.\-]+)://`)

// keywordDSN matches a libpq keyword/value connection string
// ("host=… dbname=…"): a supported-looking key followed by '='.
var keywordDSN = regexp.MustCompile(`(?i)^\s*(host|hostaddr|port|dbname|user|password|sslmode|service|connect_timeout)\s*=`)

// Parse reads a DSN: "sqlite:PATH", a plain path (SQLite), or a
// postgres:// / postgresql:// URL (the scheme in any case, RFC 3986 §3.1).
// Anything else that looks like a URL or a libpq keyword string is refused
// naming the supported forms: it is never taken for a SQLite file name. No
// error repeats the DSN; Display is safe to print.
func Parse(dsn string) (Target, error) {
	if dsn == "" {
		return Target{}, fmt.Errorf("empty --db: use %s", Supported)
	}
	if m := scheme.FindStringSubmatch(dsn); m != nil {
		switch strings.ToLower(m[1]) {
		case "postgres", "postgresql":
			return parsePostgres(dsn)
		}
		return Target{}, fmt.Errorf("--db: unsupported scheme %q: use %s", m[1], Supported)
	}
	if keywordDSN.MatchString(dsn) {
		return Target{}, fmt.Errorf("--db: a keyword/value connection string (host=… dbname=…) is not accepted: use %s", Supported)
	}
	path := strings.TrimPrefix(dsn, "sqlite:")
	path = strings.TrimPrefix(path, "file:")
	if path == "" {
		return Target{}, errors.New("--db: sqlite: needs a file path")
	}
	return SQLiteTarget(path), nil
}

// Open opens and pings the target. The driver must be registered: import
// github.com/schemastate/schemastate/drivers (the CLI does).
func (t Target) Open(ctx context.Context) (*sql.DB, error) {
	db, err := sql.Open(t.DriverName, t.DSN)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", t.Display, err)
	}
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, &reachError{msg: fmt.Sprintf("cannot reach %s: %s", t.Display, onceEach(redactErr(err, t.DSN))), err: err}
	}
	return db, nil
}

// reachError is a failed connection: its message is redacted, its chain is
// the driver's error (errors.As finds a *pgconn.PgError, a net.OpError).
type reachError struct {
	msg string
	err error
}

func (e *reachError) Error() string { return e.msg }
func (e *reachError) Unwrap() error { return e.err }

func redactErr(err error, dsn string) string {
	return redact.String(err.Error(), redact.Secrets(dsn)...)
}

// onceEach drops a line that repeats the one before it: pgx reports each
// connection attempt (with TLS, then without) on its own line, and both
// fail alike when nothing listens.
func onceEach(msg string) string {
	lines := strings.Split(msg, "\n")
	out := lines[:1]
	for _, l := range lines[1:] {
		if l != out[len(out)-1] {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
