package dsn

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/redact"
)

// PostgresTarget is the target of the PostgreSQL URL dsn taken as it is
// written (no exec mode added, not checked), its password removed from
// Display.
func PostgresTarget(dsn string) Target {
	return Target{Dialect: dialect.Postgres, DriverName: "pgx", DSN: dsn, Display: redact.String(dsn, redact.Secrets(dsn)...)}
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
