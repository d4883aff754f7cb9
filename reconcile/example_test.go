package reconcile_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	_ "github.com/schemastate/schemastate/drivers"
	"github.com/schemastate/schemastate/internal/tool/fixtures"
	"github.com/schemastate/schemastate/reconcile"
)

// hostStore opens a SQLite file holding the host's own tables, as the host's
// boot hands its *sql.DB to Reconcile; done removes it.
func hostStore() (db *sql.DB, done func()) {
	dir, err := os.MkdirTemp("", "schemastate-example")
	if err != nil {
		panic(err)
	}
	db, err = sql.Open("sqlite", filepath.Join(dir, "host.db"))
	if err != nil {
		panic(err)
	}
	script, err := fixtures.HostFixture("sqlite")
	if err != nil {
		panic(err)
	}
	for _, stmt := range fixtures.SplitSQL(script) {
		if _, err := db.Exec(stmt); err != nil {
			panic(err)
		}
	}
	return db, func() { db.Close(); os.RemoveAll(dir) }
}

var discard = reconcile.WithLogger(slog.New(slog.DiscardHandler))

// The host's boot: one call. A failed step is logged at WARN and retried on
// the next boot; the boot goes on either way.
func ExampleReconcile() {
	db, done := hostStore()
	defer done()

	rep, err := reconcile.Reconcile(context.Background(), db, discard)
	if err != nil {
		fmt.Println("boot goes on:", err)
	}
	for _, s := range rep.Steps {
		fmt.Println(s.Name, s.Status)
	}
	fmt.Println("key-bearing:", rep.EndState.KeyBearing())

	// A second boot finds nothing to change.
	rep, _ = reconcile.Reconcile(context.Background(), db, discard)
	fmt.Println("certified:", rep.Certified)
	// Output:
	// lock applied
	// host_tables unchanged
	// shape applied
	// execution_since applied
	// backfill applied
	// key-bearing: true
	// certified: true
}

// The dry run: what Reconcile would execute now, with no lock taken and
// nothing changed.
func ExamplePlan() {
	db, done := hostStore()
	defer done()

	plan, err := reconcile.Plan(context.Background(), db, discard)
	if err != nil {
		panic(err)
	}
	fmt.Println("statements to run:", len(plan.Statements()) > 0)
	// Output:
	// statements to run: true
}

// The read-only status: the keys, the AC-33 end state and each owned table's
// index set.
func ExampleObserve() {
	db, done := hostStore()
	defer done()
	if _, err := reconcile.Reconcile(context.Background(), db, discard); err != nil {
		panic(err)
	}

	obs, err := reconcile.Observe(context.Background(), db, discard)
	if err != nil {
		panic(err)
	}
	fmt.Println("state:", obs.State)
	fmt.Println("key-bearing:", obs.EndState.KeyBearing())
	fmt.Println("missing host tables:", len(obs.MissingHostTables))
	// Output:
	// state: activated
	// key-bearing: true
	// missing host tables: 0
}

// Spans through the host's own tracer provider: one for the call, one per
// step, one per phase. Without the option nothing is traced.
func ExampleWithTracerProvider() {
	db, done := hostStore()
	defer done()
	spans := tracetest.NewSpanRecorder()
	tp := trace.NewTracerProvider(trace.WithSpanProcessor(spans))

	if _, err := reconcile.Reconcile(context.Background(), db, discard, reconcile.WithTracerProvider(tp)); err != nil {
		panic(err)
	}
	for _, s := range spans.Ended() {
		if s.Name() == "schemastate.step shape" {
			fmt.Println(s.Name())
		}
	}
	// Output:
	// schemastate.step shape
}
