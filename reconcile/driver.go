package reconcile

import (
	"context"
	"database/sql"
	"fmt"

	"ariga.io/atlas/sql/migrate"
	"ariga.io/atlas/sql/schema"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/perdialect"
)

// driver is everything a dialect decides, chosen once per call (driverFor).
// The sequence (reconcile.go), the planning algorithm (shape.go) and the
// applier (apply.go) are written once against it. Each dialect implements it
// in the same files: <dialect>_driver.go (declaration, catalog reads),
// <dialect>_plan.go (planTable, pure) and <dialect>.go (the session), plus
// postgres_apply.go for the phases PostgreSQL runs outside a transaction.
type driver interface {
	dialect() dialect.Dialect

	// lockMechanism names the session's cross-replica lock (Report.Lock).
	lockMechanism() string
	// open pins the connection a reconcile runs on (its session).
	open(ctx context.Context, db *sql.DB, o *call) (session, error)
	// schemaName is the schema a lock-free look (Plan, Observe) works in:
	// main on SQLite, current_schema() on PostgreSQL.
	schemaName(ctx context.Context, q querier) (string, error)
	// atlas is Atlas's driver over q: inspection, diff and SQL rendering.
	atlas(q querier) (migrate.Driver, error)

	// tablesQuery selects, of n tables named by parameters 1…n, those that
	// exist in the reconcile's schema.
	tablesQuery(n int) string
	// catalogQuery is the certificate's read of the live catalog
	// (fingerprint.go): one text row per entry, ownedIn and hostIn the
	// parameter lists naming the tables it covers.
	catalogQuery(ownedIn, hostIn string) string

	// facts reads what planning needs of a live table beyond Atlas's
	// inspection. It reads the catalog only.
	facts(ctx context.Context, q querier, schemaName string, live, want *schema.Table) (tableFacts, error)
	// planTable plans one owned table from the inspected live table (nil
	// when it does not exist), its declaration and facts: pure, no database.
	planTable(pc *planContext, tp *tablePlan, f tableFacts) error
	// dropSQL renders the drop of an index, foreign key or check of table
	// with the module's own quoting (ident.go: a name Atlas must not render).
	dropSQL(schemaName, table string, c schema.Change) (string, error)
	// observable is the inspected live table without what cannot serve as
	// the key AC-33 observes (a DEFERRABLE unique on PostgreSQL): a new
	// table, the inspected one left as read.
	observable(ctx context.Context, q querier, live *schema.Table) (*schema.Table, error)
	// explain adds to a statement's error what the database said beyond
	// its message (PostgreSQL's DETAIL and HINT).
	explain(err error) error
}

// driverFor is the dialect's driver; an unknown dialect is an error.
func driverFor(d dialect.Dialect) (driver, error) {
	drv, err := drivers.For(d)
	if err != nil {
		return nil, fmt.Errorf("reconcile: %w", err)
	}
	return drv, nil
}

var drivers = perdialect.Of[driver]{Postgres: postgresDriver{}, SQLite: sqliteDriver{}}

// tableFacts are the live catalog facts planning needs beyond Atlas's
// inspection of the table, read by driver.facts so that planning itself
// reads nothing.
type tableFacts struct {
	// deferrable names the table's DEFERRABLE unique constraints
	// (PostgreSQL): no ON CONFLICT arbiter, so never the declared key.
	deferrable map[string]bool
	// invalid names the table's INVALID indexes (PostgreSQL): a build that
	// crashed or failed.
	invalid []string
	// size is the live table's size, which chooses the path (PostgreSQL).
	size tableSize
	// rebuild is what the shadow-table rebuild needs to know (PostgreSQL).
	rebuild *rebuildFacts
	// triggers are the CREATE TRIGGER statements of the table's triggers,
	// which a rebuild creates again (SQLite).
	triggers []string
	// referencedBy names the tables whose foreign keys reference the table
	// (SQLite).
	referencedBy []string
	// indexSQL is each live index's CREATE INDEX as stored, by name; an
	// inline UNIQUE has none (SQLite).
	indexSQL map[string]string
	// notValid names the table's NOT VALID checks and foreign keys
	// (PostgreSQL): a recipe stopped before its validation.
	notValid map[string]bool
	// sameDefault names the columns whose live default is the declared one
	// as the server prints it back, though the text differs (PostgreSQL:
	// gen_random_uuid()::text reads back as (gen_random_uuid())::text).
	sameDefault map[string]bool
	// checks are the live and declared checks as the server normalizes
	// them (PostgreSQL): what the diff and the recipes' done-checks compare.
	checks *checkFacts
	// deferrableFKs names the table's DEFERRABLE foreign keys (PostgreSQL),
	// which Atlas does not tell from the declared ones.
	deferrableFKs map[string]bool
	// newTable is a shadow-table rebuild's new table, when one exists
	// (PostgreSQL).
	newTable *shadowTable
}
