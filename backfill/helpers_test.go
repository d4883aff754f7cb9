package backfill_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/backfill"
	"github.com/schemastate/schemastate/internal/hooks"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/keys"
	"github.com/schemastate/schemastate/reconcile"
)

// declared gives db the host tables and the declared task_session_subagents
// table, with the two backfill keys removed again so each test starts from
// "backfill not yet run" (the reconcile that created the table ran it over
// an empty message table).
func declared(t testing.TB, db *dbtest.DB) {
	t.Helper()
	db.Host(t)
	reconcileQuietly(t, db)
	clearKeys(t, db, keys.CaptureSince, keys.BackfillThrough)
}

// reconcileQuietly runs a whole reconcile of db, its log discarded.
func reconcileQuietly(t testing.TB, db *dbtest.DB) *reconcile.Report {
	t.Helper()
	rep, err := reconcile.Reconcile(context.Background(), db.DB, reconcile.WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	return rep
}

// eachDeclared runs fn on each dialect against a declared store (declared).
func eachDeclared(t *testing.T, fn func(t *testing.T, db *dbtest.DB)) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		declared(t, db)
		fn(t, db)
	})
}

func clearKeys(t testing.TB, db *dbtest.DB, names ...string) {
	t.Helper()
	for _, k := range names {
		_, err := db.DB.Exec(db.Q(`DELETE FROM kandev_meta WHERE key = ?`), k)
		require.NoError(t, err)
	}
}

// run executes backfill.Run in its own transaction and commits it only on success.
func run(t testing.TB, db *dbtest.DB, opts ...backfill.Option) (backfill.Result, error) {
	t.Helper()
	return runHooked(t, db, nil, opts...)
}

// runHooked is run with fp called at each failpoint (internal/hooks).
func runHooked(t testing.TB, db *dbtest.DB, fp func(point string) error, opts ...backfill.Option) (backfill.Result, error) {
	t.Helper()
	ctx := hooks.With(context.Background(), hooks.Hooks{Failpoint: fp})
	tx, err := db.DB.BeginTx(ctx, nil)
	require.NoError(t, err)
	res, err := backfill.Run(ctx, tx, db.Dialect, opts...)
	if err != nil {
		require.NoError(t, tx.Rollback())
		return res, err
	}
	require.NoError(t, tx.Commit())
	return res, nil
}

func mustRun(t testing.TB, db *dbtest.DB, opts ...backfill.Option) backfill.Result {
	t.Helper()
	res, err := run(t, db, opts...)
	require.NoError(t, err)
	return res
}

func keySet(t *testing.T, db *dbtest.DB) keys.Set {
	t.Helper()
	ks, err := keys.Read(context.Background(), db.DB, db.Dialect)
	require.NoError(t, err)
	return ks
}
