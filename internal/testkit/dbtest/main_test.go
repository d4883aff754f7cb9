package dbtest

import (
	"context"
	"errors"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// A server whose named database does not exist (a stock server has no
// "test" database) is reached through its maintenance database, where the
// tests' own databases are created.
func TestOpenAdmin_FallsBackToTheMaintenanceDatabase(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	u, err := url.Parse(PostgresDSN())
	require.NoError(t, err)
	u.Path = "/schemastate_no_such_database"
	admin, err := openAdmin(ctx, u)
	var pgErr *pgconn.PgError
	if err != nil && !errors.As(err, &pgErr) && !PostgresRequired() {
		t.Skipf("PostgreSQL unreachable: %v", err) // no server answered; one that did must not refuse
	}
	require.NoError(t, err)
	defer admin.Close()
	var name string
	require.NoError(t, admin.QueryRowContext(ctx, "SELECT current_database()").Scan(&name))
	require.Equal(t, "postgres", name)
}

func TestMain(m *testing.M) { os.Exit(Main(m)) }

// A run that cannot reach the server fails before any test runs, with the
// one line go test shows; the skip happens only when asked for.
func TestMain_UnreachableServerFailsInOneLineUnlessTheSkipIsAsked(t *testing.T) {
	run := func(env ...string) (int, string) {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestOpenAdmin_FallsBackToTheMaintenanceDatabase$", "-test.v")
		cmd.Env = append(withoutEnv("CI", "SCHEMASTATE_REQUIRE_POSTGRES", EnvSkip, EnvDSN),
			append([]string{EnvDSN + "=postgres://postgres:secret@127.0.0.1:1/nowhere?sslmode=disable&connect_timeout=2"}, env...)...)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatalf("run the test binary: %v", err)
		}
		return cmd.ProcessState.ExitCode(), string(out)
	}

	code, out := run()
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "dbtest: PostgreSQL unreachable at postgres://postgres:xxxxx@127.0.0.1:1/nowhere")
	require.Contains(t, out, EnvSkip+"=skip to test SQLite only")
	require.NotContains(t, out, "secret")
	require.NotContains(t, out, "=== RUN", "no test ran")

	code, out = run(EnvSkip + "=skip")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "--- SKIP: TestOpenAdmin_FallsBackToTheMaintenanceDatabase")

	code, out = run(EnvSkip+"=skip", "CI=true")
	require.Equal(t, 1, code, "CI=true overrules the skip: %s", out)
}

// withoutEnv is this process's environment without the named variables.
func withoutEnv(names ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		keep := true
		for _, n := range names {
			if strings.HasPrefix(kv, n+"=") {
				keep = false
			}
		}
		if keep {
			out = append(out, kv)
		}
	}
	return out
}
