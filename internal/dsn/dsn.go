// Package dsn reads the CLI's --db argument (a SQLite path or a PostgreSQL
// URL) into what sql.Open takes, with a display form safe to print, and
// opens it with errors that never repeat a password.
package dsn

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/redact"
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

// sqliteForm is how a SQLite file is opened.
type sqliteForm int

const (
	formWrite    sqliteForm = iota // SQLiteDSN
	formReadOnly                   // SQLiteReadOnlyDSN
	formNewStore                   // SQLiteNewStoreDSN
)

// DefaultBusyTimeout is how long a SQLite connection schemastate opens waits
// for another connection's write lock before it fails with SQLITE_BUSY.
const DefaultBusyTimeout = 10 * time.Second

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

// sqlite rebuilds a SQLite target's DSN from its form and busy timeout.
func (t Target) sqlite() Target {
	if t.Dialect == dialect.SQLite {
		t.DSN = sqliteDSN(t.Path, t.form, t.busy)
	}
	return t
}

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
	return Target{Dialect: dialect.SQLite, DriverName: "sqlite", DSN: SQLiteDSN(path), Display: "sqlite:" + path, Path: path}, nil
}

func parsePostgres(dsn string) (Target, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		// url.Error quotes the whole URL, password included: keep only
		// what is wrong with it.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return Target{}, fmt.Errorf("--db: not a valid PostgreSQL URL: %s", redact.String(err.Error(), redact.Secrets(dsn)...))
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return Target{}, fmt.Errorf("--db: not a valid PostgreSQL URL: port %q is not a number from 1 to 65535", p)
		}
	}
	// pgx accepts only the lower-case schemes; the rest is passed as written.
	lower := strings.ToLower(u.Scheme)
	dsn = lower + dsn[len(lower):]
	u.Scheme = lower
	display := redact.String(u.Redacted())
	if !u.Query().Has(ExecModeParam) {
		dsn = withQueryParam(dsn, ExecModeParam, DefaultExecMode)
	}
	return Target{Dialect: dialect.Postgres, DriverName: "pgx", DSN: dsn, Display: display}, nil
}

// ExecModeParam is pgx's DSN parameter for how it sends a statement.
const ExecModeParam = "default_query_exec_mode"

// DefaultExecMode is the pgx mode the CLI opens PostgreSQL in when the URL
// names none: each statement is one unnamed Parse, Bind and Execute,
// parameters bound by the server, in one round trip. pgx's own default
// (cache_statement) prepares every statement under a name derived from its
// SQL, so behind a transaction-mode pooler (PgBouncer 1.18, or any without
// prepared-statement tracking) two processes handed the same server
// connection collide (42P05 "prepared statement … already exists") and a
// statement prepared on one server connection is executed on another
// (26000). simple_protocol works there too, but interpolates the values
// into the SQL text on the client; the describe modes take two round trips,
// which a transaction-mode pooler may send to two server connections.
// Measured direct, exec is within the noise of the default for whole
// commands (docs/poolers.md). A URL that names a mode keeps it.
const DefaultExecMode = "exec"

// withQueryParam is dsn with key=value added to its query, the rest of the
// URL as written.
func withQueryParam(dsn, key, value string) string {
	base, frag, hasFrag := strings.Cut(dsn, "#")
	sep := "?"
	if strings.Contains(base, "?") {
		sep = "&"
		if strings.HasSuffix(base, "?") || strings.HasSuffix(base, "&") {
			sep = ""
		}
	}
	base += sep + url.QueryEscape(key) + "=" + url.QueryEscape(value)
	if hasFrag {
		base += "#" + frag
	}
	return base
}

// SQLiteDSN is the modernc DSN schemastate uses to write an existing SQLite
// file (reconcile, ingest, transcript recover): foreign keys on (as the host
// runs), a busy timeout (DefaultBusyTimeout) so replicas wait for each
// other's write lock instead of failing, and BEGIN IMMEDIATE. It sets no
// journal mode: the journal mode is persistent in the file and is the host's
// choice, so opening the host's database never switches it (a
// rollback-journal file stays one).
func SQLiteDSN(path string) string { return sqliteDSN(path, formWrite, 0) }

// SQLiteNewStoreDSN is SQLiteDSN for a store schemastate creates itself
// (demo, generate, bench, tests): also WAL, so its readers are not blocked.
func SQLiteNewStoreDSN(path string) string { return sqliteDSN(path, formNewStore, 0) }

// SQLiteReadOnlyDSN opens a SQLite file for reading only (status, health,
// plan, transcript ls): mode=ro, so the file is never created (a missing file
// fails to open), written, given a header (a 0-byte file stays 0 bytes) or
// switched to another journal mode, and a read-only file or directory reads
// as sqlite3 reads it. The only pragma is busy_timeout, a setting of the
// connection that writes nothing.
func SQLiteReadOnlyDSN(path string) string { return sqliteDSN(path, formReadOnly, 0) }

func sqliteDSN(path string, form sqliteForm, busy time.Duration) string {
	if busy <= 0 {
		busy = DefaultBusyTimeout
	}
	timeout := fmt.Sprintf("_pragma=busy_timeout(%d)", busy.Milliseconds())
	uri := "file:" + sqliteURIPath(path)
	switch form {
	case formReadOnly:
		return uri + "?mode=ro&" + timeout
	case formNewStore:
		return uri + "?_pragma=foreign_keys(1)&" + timeout + "&_txlock=immediate&_pragma=journal_mode(WAL)"
	}
	return uri + "?_pragma=foreign_keys(1)&" + timeout + "&_txlock=immediate"
}

// sqliteURIPath escapes a path for a file: URI. A '#', '?' or '%' left as it
// is would make the driver open (and, writing, create) a file at a truncated
// path.
func sqliteURIPath(path string) string {
	return strings.NewReplacer("%", "%25", "#", "%23", "?", "%3F").Replace(path)
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
