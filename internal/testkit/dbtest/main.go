package dbtest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// databasePrefix names the PostgreSQL databases Main creates.
const databasePrefix = "schemastate_test_"

// staleAfter is how old a database named by Main must be before a later test
// binary drops it as left behind by a killed run: longer than any test run.
const staleAfter = 6 * time.Hour

// Main runs a test binary's tests (m.Run) with every PostgreSQL test of the
// binary in a database of its own, created on the server of PostgresDSN and
// dropped afterwards; schemas still isolate the tests inside it.
//
// go test runs packages in parallel against one server. CREATE INDEX
// CONCURRENTLY (the online upgrade) waits for every transaction of its
// database that holds an older snapshot, so in a shared database one
// package's long transaction would stall another package's online reconcile.
// Snapshots do not cross databases.
//
// The database's URL is put in EnvDSN, so PostgresDSN and every child process
// a test starts reach it. When no server answers and PostgreSQL is required
// (PostgresRequired), no test runs: the binary fails with one line saying
// what was unreachable and how to proceed, the line go test shows at the
// end. When the skip was asked for, the tests run and each PostgreSQL half
// skips.
//
// Each of after runs once the tests have run (a package's own clean-up: the
// binary internal/testkit/proctest built, say).
func Main(m *testing.M, after ...func()) int {
	drop, err := ownDatabase()
	if err != nil && PostgresRequired() {
		fmt.Fprintln(os.Stderr, "dbtest: "+unreachable(PostgresDSN(), err))
		for _, fn := range after {
			fn()
		}
		return 1
	}
	code := m.Run()
	drop()
	for _, fn := range after {
		fn()
	}
	return code
}

// ownDatabase creates the binary's database; err is set when no server
// could be reached (a server that answered but refused the CREATE DATABASE
// leaves the tests sharing its database, as they did before).
func ownDatabase() (drop func(), err error) {
	noop := func() {}
	base := PostgresDSN()
	u, err := url.Parse(base)
	if err != nil {
		return noop, fmt.Errorf("parse %s: %w", EnvDSN, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	admin, err := openAdmin(ctx, u)
	if err != nil {
		return noop, err
	}
	dropStale(ctx, admin)

	var b [4]byte
	_, _ = rand.Read(b[:])
	name := fmt.Sprintf("%s%d_%s", databasePrefix, time.Now().Unix(), hex.EncodeToString(b[:]))
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		fmt.Fprintf(os.Stderr, "dbtest: CREATE DATABASE %s: %v (tests share %s)\n", name, err, u.Path)
		admin.Close()
		return noop, nil
	}
	u.Path = "/" + name
	os.Setenv(EnvDSN, u.String())
	return func() {
		os.Setenv(EnvDSN, base)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			fmt.Fprintf(os.Stderr, "dbtest: DROP DATABASE %s: %v\n", name, err)
		}
		admin.Close()
	}, nil
}

// openAdmin connects to the server of u, in u's database or, when that
// database does not exist (a stock server has no "test" database), in the
// server's maintenance database "postgres": the tests create their own
// databases either way.
func openAdmin(ctx context.Context, u *url.URL) (*sql.DB, error) {
	admin, err := ping(ctx, u.String())
	var pgErr *pgconn.PgError
	if err != nil && errors.As(err, &pgErr) && pgErr.Code == "3D000" { // invalid_catalog_name
		maintenance := *u
		maintenance.Path = "/postgres"
		admin, err = ping(ctx, maintenance.String())
	}
	return admin, err
}

// ping opens dsn and reaches the server.
func ping(ctx context.Context, dsn string) (*sql.DB, error) {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, err
	}
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// dropStale drops databases Main created more than staleAfter ago: a test
// binary that was killed never dropped its own.
func dropStale(ctx context.Context, admin *sql.DB) {
	rows, err := admin.QueryContext(ctx, "SELECT datname FROM pg_database WHERE datname LIKE $1", databasePrefix+"%")
	if err != nil {
		return
	}
	var stale []string
	for rows.Next() {
		var name string
		if rows.Scan(&name) != nil {
			continue
		}
		created, _, ok := strings.Cut(strings.TrimPrefix(name, databasePrefix), "_")
		sec, err := strconv.ParseInt(created, 10, 64)
		if ok && err == nil && time.Since(time.Unix(sec, 0)) > staleAfter {
			stale = append(stale, name)
		}
	}
	rows.Close()
	for _, name := range stale {
		_, _ = admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	}
}
