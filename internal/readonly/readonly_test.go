package readonly_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/internal/perdialect"
	"github.com/schemastate/schemastate/internal/readonly"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
)

func TestReadonly_ReadsStringsSchemaTablesAndColumns(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		_, err := db.ExecContext(ctx, `CREATE TABLE present (here text)`)
		require.NoError(t, err)
		_, err = db.ExecContext(ctx, `INSERT INTO present VALUES ('c'), ('b'), ('a')`)
		require.NoError(t, err)
		tx, err := readonly.Begin(ctx, db.DB, db.Dialect)
		require.NoError(t, err)
		defer tx.Rollback() //nolint:errcheck
		for table, want := range map[string]bool{"present": true, "absent": false} {
			got, err := readonly.TableExists(ctx, tx, db.Dialect, table)
			require.NoError(t, err)
			require.Equal(t, want, got, table)
		}
		for column, want := range map[string]bool{"here": true, "gone": false} {
			got, err := readonly.ColumnExists(ctx, tx, db.Dialect, "present", column)
			require.NoError(t, err)
			require.Equal(t, want, got, column)
		}
		got, err := readonly.Strings(ctx, tx, db.Q(`SELECT here FROM present WHERE here <> ? ORDER BY here`), "b")
		require.NoError(t, err)
		require.Equal(t, []string{"a", "c"}, got)
		name, err := readonly.SchemaName(ctx, tx, db.Dialect)
		require.NoError(t, err)
		require.Equal(t, db.Schema, name)
		o, err := readonly.Options(db.Dialect)
		require.NoError(t, err)
		require.True(t, o.ReadOnly)
		if db.Dialect == "postgres" {
			require.Equal(t, sql.LevelRepeatableRead, o.Isolation, "one snapshot for every statement")
		}
	})
}

func TestReadonly_UnknownDialectIsAnError(t *testing.T) {
	db := dbtest.Open(t, "sqlite")
	ctx := context.Background()
	_, err := readonly.Options("mysql")
	require.ErrorIs(t, err, perdialect.ErrUnknown)
	_, err = readonly.Begin(ctx, db.DB, "mysql")
	require.ErrorIs(t, err, perdialect.ErrUnknown)
	_, err = readonly.TableExists(ctx, db.DB, "mysql", "t")
	require.ErrorIs(t, err, perdialect.ErrUnknown)
	_, err = readonly.ColumnExists(ctx, db.DB, "mysql", "t", "c")
	require.ErrorIs(t, err, perdialect.ErrUnknown)
	_, err = readonly.SchemaName(ctx, db.DB, "mysql")
	require.ErrorIs(t, err, perdialect.ErrUnknown)
}
