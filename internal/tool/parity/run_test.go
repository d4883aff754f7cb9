package parity

import (
	"context"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/internal/tool/dsn"
)

// The stores are removed when the run ends: the temporary directory on
// SQLite, every schema it created on PostgreSQL.
func TestRun_RemovesEveryStore(t *testing.T) {
	ctx := context.Background()
	for _, d := range []dialect.Dialect{dialect.SQLite, dialect.Postgres} {
		t.Run(string(d), func(t *testing.T) {
			tmp := t.TempDir()
			t.Setenv("TMPDIR", tmp) // the SQLite stores' directory is made here
			server := ""
			if d == dialect.Postgres {
				dbtest.Open(t, d) // skips (or fails in CI) without a server
				server = dbtest.PostgresDSN()
			}
			rep, err := Run(ctx, Config{Server: server})
			require.NoError(t, err)
			require.Len(t, rep.Comparisons, 2)
			left, err := os.ReadDir(tmp)
			require.NoError(t, err)
			require.Empty(t, left)
			if d == dialect.SQLite {
				return
			}
			admin, err := dsn.Target{DriverName: "pgx", DSN: server}.Open(ctx)
			require.NoError(t, err)
			defer admin.Close()
			var n int
			require.NoError(t, admin.QueryRow(`SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'schemastate\_parity\_%'`).Scan(&n))
			require.Zero(t, n)
		})
	}
}
