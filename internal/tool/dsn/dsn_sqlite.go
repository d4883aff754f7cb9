package dsn

import (
	"fmt"
	"strings"
	"time"

	"github.com/schemastate/schemastate/dialect"
)

// SQLiteTarget is the target of the SQLite file at path, opened for writing
// (SQLiteDSN) as Parse reads "sqlite:PATH".
func SQLiteTarget(path string) Target {
	return Target{Dialect: dialect.SQLite, DriverName: "sqlite", DSN: SQLiteDSN(path), Display: "sqlite:" + path, Path: path}
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

// sqlite rebuilds a SQLite target's DSN from its form and busy timeout.
func (t Target) sqlite() Target {
	if t.Dialect == dialect.SQLite {
		t.DSN = sqliteDSN(t.Path, t.form, t.busy)
	}
	return t
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
