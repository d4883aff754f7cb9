package parity

import (
	"context"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/dbtest"
	"github.com/schemastate/schemastate/internal/dsn"
)

// The stores are removed when the run ends: the temporary directory on
// SQLite, every schema it created on PostgreSQL.
func TestScratch_RemovesEveryStore(t *testing.T) {
	ctx := context.Background()
	for _, d := range []dialect.Dialect{dialect.SQLite, dialect.Postgres} {
		t.Run(string(d), func(t *testing.T) {
			server := ""
			if d == dialect.Postgres {
				dbtest.Open(t, d) // skips (or fails in CI) without a server
				server = dbtest.PostgresDSN()
			}
			sc, err := NewScratch(ctx, server)
			require.NoError(t, err)
			for _, store := range []string{Fresh, PreAmendment, HostDDL} {
				_, err := build(ctx, sc, store, Config{})
				require.NoError(t, err)
			}
			admin := sc.admin
			schemas, dir := sc.schemas, sc.dir
			if d == dialect.Postgres {
				require.Len(t, schemas, 3)
				admin, err = dsn.Target{DriverName: "pgx", DSN: server}.Open(ctx)
				require.NoError(t, err)
				defer admin.Close()
			}
			require.NoError(t, sc.Close())
			if d == dialect.SQLite {
				_, err := os.Stat(dir)
				require.ErrorIs(t, err, os.ErrNotExist)
				return
			}
			for _, s := range schemas {
				var n int
				require.NoError(t, admin.QueryRow(`SELECT count(*) FROM pg_namespace WHERE nspname = $1`, s).Scan(&n))
				require.Zero(t, n, s)
			}
		})
	}
}
