// Package pgbouncer starts a real PgBouncer in front of the PostgreSQL test
// server, for tests that must see what a host behind a connection pooler
// sees: server connections shared between clients, statements prepared on one
// server connection and run on another, session state left for the next
// client.
//
// Start runs the pgbouncer binary (Debian's package, 1.18 on the development
// machines: no prepared-statement tracking, the strictest pooler a host
// meets) on a free loopback port, in front of a database of the test's own,
// and stops it when the test ends. When the binary is absent the test skips
// locally and FAILS under CI (dbtest.PostgresRequired), as a missing server
// does: a CI run that skips the pooler tests proves nothing about poolers.
package pgbouncer

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/internal/testkit/proctest"

	_ "github.com/schemastate/schemastate/drivers"
)

// EnvBinary names the environment variable that points at a pgbouncer
// binary to use instead of the one on PATH (or in /usr/sbin, where Debian
// puts it): a newer build, say.
const EnvBinary = "SCHEMASTATE_TEST_PGBOUNCER"

// Mode is PgBouncer's pool_mode.
type Mode string

const (
	// Transaction hands a server connection to a client for one
	// transaction (or one statement outside a transaction): the mode most
	// Kubernetes deployments, Supabase's and Neon's pooled endpoints run.
	Transaction Mode = "transaction"
	// Session hands a server connection to a client until it disconnects,
	// then runs server_reset_query (DISCARD ALL) on it.
	Session Mode = "session"
	// Statement hands a server connection to a client for one statement and
	// refuses transactions of more than one: nothing that needs a
	// transaction can be guaranteed there.
	Statement Mode = "statement"
)

// DefaultPoolSize is the server connections per database Start allows
// unless told otherwise: few, so clients share them as they do in
// production.
const DefaultPoolSize = 4

// Options configures Start.
type Options struct {
	Mode Mode
	// PoolSize is default_pool_size (0: DefaultPoolSize).
	PoolSize int
}

// Pooler is a running PgBouncer in front of a database of the test's own.
type Pooler struct {
	// DSN reaches the database through PgBouncer: what a host's replicas
	// would be given, and what the CLI's --db takes.
	DSN string
	// Direct is the same database reached without PgBouncer (its public
	// schema), for setting up and checking what the pooled clients did.
	Direct *dbtest.DB
	// Database is the database's name.
	Database string
	// Port is the loopback port PgBouncer listens on.
	Port int

	log *proctest.Buffer
}

// Log is what PgBouncer has written so far (its log goes to stderr).
func (p *Pooler) Log() string { return strings.TrimSpace(p.log.String()) }

// Binary returns the pgbouncer binary to run, or "" when there is none (a
// binary EnvBinary names that does not exist counts as none).
func Binary() string {
	if p := os.Getenv(EnvBinary); p != "" {
		if _, err := os.Stat(p); err != nil {
			return ""
		}
		return p
	}
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/sbin/pgbouncer"); err == nil {
		return "/usr/sbin/pgbouncer"
	}
	return ""
}

// Start creates a database of the test's own on the PostgreSQL test server,
// starts PgBouncer in front of it in opts.Mode and returns both ways to
// reach it. PgBouncer is stopped and the database dropped when the test
// ends.
//
// The database is a whole database, not a schema of dbtest's: PgBouncer
// refuses a search_path in the startup packet (it cannot track it), and in
// session mode its DISCARD ALL would reset one set after connecting, so a
// pooled client sees the database's default schema, public.
func Start(t testing.TB, opts Options) *Pooler {
	t.Helper()
	switch opts.Mode {
	case Transaction, Session, Statement:
	default:
		t.Fatalf("pgbouncer: mode %q: use Transaction, Session or Statement", opts.Mode)
	}
	if opts.PoolSize <= 0 {
		opts.PoolSize = DefaultPoolSize
	}
	bin := Binary()
	if bin == "" {
		if dbtest.PoolerRequired() {
			t.Fatalf("pgbouncer is required (CI=true or SCHEMASTATE_REQUIRE_POSTGRES=1) but not installed: apt-get install pgbouncer, or set %s", EnvBinary)
		}
		t.Skipf("pgbouncer not installed (apt-get install pgbouncer, or set %s)", EnvBinary)
	}
	direct, name := ownDatabase(t)
	server, err := url.Parse(dbtest.PostgresDSN())
	require.NoError(t, err)

	dir := configDir(t)
	login := server.User.Username()
	if login == "" {
		login = "postgres"
	}
	host, port := server.Hostname(), server.Port()
	if port == "" {
		port = "5432"
	}
	authFile := filepath.Join(dir, "users.txt")
	writeFile(t, authFile, fmt.Sprintf("%q \"\"\n", login))

	var cmd *exec.Cmd
	var log *proctest.Buffer
	var listen int
	// A free port found by listening on :0 may be taken again before
	// PgBouncer binds it: try another.
	for attempt := 0; ; attempt++ {
		listen = freePort(t)
		ini := filepath.Join(dir, "pgbouncer.ini")
		writeFile(t, ini, config(opts, listen, host, port, authFile))
		args := []string{ini}
		if os.Geteuid() == 0 {
			// PgBouncer refuses to run as root.
			args = append([]string{"-u", "postgres"}, args...)
		}
		log = &proctest.Buffer{}
		cmd = exec.Command(bin, args...)
		cmd.Stdout, cmd.Stderr = log, log
		require.NoError(t, cmd.Start(), "start %s", bin)
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		err := waitListening(listen, exited)
		if err == nil {
			t.Cleanup(func() { stop(cmd, exited) })
			break
		}
		stop(cmd, exited)
		if attempt == 2 {
			t.Fatalf("pgbouncer did not start: %v\n%s", err, strings.TrimSpace(log.String()))
		}
	}

	u := *server
	u.Host = net.JoinHostPort("127.0.0.1", strconv.Itoa(listen))
	u.Path = "/" + name
	q := u.Query()
	q.Del("search_path")
	q.Set("sslmode", "disable")
	u.RawQuery = q.Encode()
	return &Pooler{DSN: u.String(), Direct: direct, Database: name, Port: listen, log: log}
}

// config is the pgbouncer.ini: every database name forwarded to the test
// server (the "*" fallback), trust authentication for the test login (the
// test server trusts loopback), the log on stderr, no Unix socket (Debian's default directory is shared with
// the system's own PgBouncer).
func config(opts Options, listen int, host, port, authFile string) string {
	return fmt.Sprintf(`[databases]
* = host=%s port=%s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = %s
default_pool_size = %d
max_client_conn = 200
log_connections = 0
log_disconnections = 0
`, host, port, listen, authFile, opts.Mode, opts.PoolSize)
}

// ownDatabase creates a database on the test server, dropped (every
// connection to it closed) when the test ends, and opens it directly.
func ownDatabase(t testing.TB) (*dbtest.DB, string) {
	t.Helper()
	base := dbtest.PostgresDSN()
	admin, err := sql.Open("pgx", base)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := admin.PingContext(ctx); err != nil {
		admin.Close()
		if dbtest.PostgresRequired() {
			t.Fatalf("PostgreSQL is required but unreachable: %v", err)
		}
		t.Skipf("PostgreSQL unreachable (set %s): %v", dbtest.EnvDSN, err)
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := "schemastate_pool_" + hex.EncodeToString(b[:])
	_, err = admin.ExecContext(ctx, "CREATE DATABASE "+name)
	require.NoError(t, err)
	u, err := url.Parse(base)
	require.NoError(t, err)
	u.Path = "/" + name
	q := u.Query()
	q.Del("search_path")
	u.RawQuery = q.Encode()
	db, err := sql.Open("pgx", u.String())
	require.NoError(t, err)
	// Registered first, so it runs last: after PgBouncer has stopped.
	t.Cleanup(func() {
		db.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Logf("pgbouncer: DROP DATABASE %s: %v", name, err)
		}
		admin.Close()
	})
	return &dbtest.DB{DB: db, Dialect: dialect.Postgres, DSN: u.String(), CLIDSN: u.String(), Schema: "public"}, name
}

// configDir is a directory for the configuration that PgBouncer, running
// as postgres when the test runs as root, can read (a test's TempDir is
// root's alone).
func configDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "schemastate-pgbouncer-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	if os.Geteuid() == 0 {
		uid, gid := postgresIDs(t)
		require.NoError(t, os.Chown(dir, uid, gid))
	}
	return dir
}

func postgresIDs(t testing.TB) (uid, gid int) {
	t.Helper()
	u, err := user.Lookup("postgres")
	require.NoError(t, err, "PgBouncer runs as postgres when the tests run as root")
	uid, err = strconv.Atoi(u.Uid)
	require.NoError(t, err)
	gid, err = strconv.Atoi(u.Gid)
	require.NoError(t, err)
	return uid, gid
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// waitListening waits until something accepts connections on port, or the
// process exits (a port taken meanwhile, a bad configuration).
func waitListening(port int, exited <-chan error) error {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			return fmt.Errorf("exited: %v", err)
		default:
		}
		if c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
			c.Close()
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("not listening on %s after 10 s", addr)
}

// stop ends PgBouncer (SIGTERM is its immediate shutdown: server connections
// are closed, so the database can be dropped), killing it if it lingers.
func stop(cmd *exec.Cmd, exited <-chan error) {
	if cmd.Process == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
}
