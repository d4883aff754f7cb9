// Package replicatest plays, in a test, another replica booting at the same
// moment: a reconcile stopped at one of its failpoints while it holds the
// boot lock, for the tests of what a second reconcile does meanwhile.
package replicatest

import (
	"context"
	"database/sql"
	"sync"
	"testing"

	"github.com/schemastate/schemastate/internal/hooks"
	"github.com/schemastate/schemastate/reconcile"
)

// HoldingTheLock starts a reconcile of db (with opts) that stops the first
// time it reaches point, and returns once it has (failing t if it ends
// first). finish lets it go on and returns
// its report and error; the test's end lets it go too, should the test fail
// first.
func HoldingTheLock(t testing.TB, db *sql.DB, point string, opts ...reconcile.Option) (finish func() (*reconcile.Report, error)) {
	t.Helper()
	holding, release := make(chan struct{}), make(chan struct{})
	type result struct {
		rep *reconcile.Report
		err error
	}
	done := make(chan result, 1)
	var stopped sync.Once
	ctx := hooks.With(context.Background(), hooks.Hooks{Failpoint: func(p string) error {
		if p == point {
			stopped.Do(func() { close(holding); <-release })
		}
		return nil
	}})
	go func() {
		rep, err := reconcile.Reconcile(ctx, db, opts...)
		done <- result{rep, err}
	}()
	select {
	case <-holding:
	case r := <-done:
		t.Fatalf("the reconcile ended before reaching %s: %v", point, r.err)
	}
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	return func() (*reconcile.Report, error) {
		once.Do(func() { close(release) })
		r := <-done
		return r.rep, r.err
	}
}
