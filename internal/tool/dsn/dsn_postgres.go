package dsn

import (
	"errors"
	"net/url"
	"strconv"
	"strings"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/tool/redact"
)

// PostgresTarget is the target of the PostgreSQL URL dsn taken as it is
// written (no exec mode added, not checked), its password removed from
// Display.
func PostgresTarget(dsn string) Target {
	return Target{Dialect: dialect.Postgres, DriverName: "pgx", DSN: dsn, Display: redact.String(dsn, redact.Secrets(dsn)...)}
}

// badURL refuses a PostgreSQL URL. Its reason quotes nothing of the URL:
// anything after the scheme may be part of a password, and a parser's
// message would repeat the bytes it choked on (net/url's `invalid URL escape
// "%ZZ"`, `invalid port ":cd" after host`).
func badURL(reason string) error {
	return errors.New("--db: not a valid PostgreSQL URL: " + reason)
}

// The reasons a PostgreSQL URL is refused for; each is constant text.
const (
	reasonEscape = "a '%' is not followed by two hexadecimal digits (write a '%' in the user or password as %25)"
	reasonHost   = "the host holds a character a host name cannot"
	reasonPort   = "the port is not a number from 1 to 65535 (a '/', '?' or '#' in the password ends the host: write them as %2F, %3F, %23)"
	reasonSyntax = "it does not parse as a URL"
	reasonAt     = "an '@' is not the one that ends the user and password (a '/', '?' or '#' in a password ends the host): write an '@' in a user, password or parameter as %40, and '/', '?', '#' in a password as %2F, %3F, %23"
)

func parsePostgres(dsn string) (Target, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		var esc url.EscapeError
		var host url.InvalidHostError
		switch {
		case errors.As(err, &esc):
			return Target{}, badURL(reasonEscape)
		case errors.As(err, &host):
			return Target{}, badURL(reasonHost)
		case strings.Contains(err.Error(), "invalid port"):
			return Target{}, badURL(reasonPort)
		}
		return Target{}, badURL(reasonSyntax)
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return Target{}, badURL(reasonPort)
		}
	}
	// net/url ends the user and password at the LAST '@' before the host,
	// pgx at the FIRST: a user or password holding an '@' is read by the two
	// as different hosts. And a password holding a '/', '?' or '#' ends the
	// host there, leaving its '@' in the path, query or fragment, where the
	// password would be displayed as part of the URL. Either is refused, so
	// the URL connects where it displays and Display never holds a password.
	if strings.Count(dsn, "@") > 1 || (u.User == nil && strings.Contains(dsn, "@")) {
		return Target{}, badURL(reasonAt)
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
