package lint

import (
	"ariga.io/atlas/sql/schema"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/ops"
	"github.com/schemastate/schemastate/internal/perdialect"
	"github.com/schemastate/schemastate/internal/tool/dsn"
)

// dialectRules are the parts of lint's judgement that differ by dialect
// (rules_<dialect>.go). Lint checks every dialect it is given against
// dialects first, so the functions below take the value for a checked one.
type dialectRules struct {
	// differ diffs two declarations of a host table.
	differ schema.Differ
	// lockHazards adds the hazards of change c to table tc that come from
	// the dialect's table locks, beside the rules every dialect shares.
	lockHazards func(d dialect.Dialect, tc ops.TableChanges, c schema.Change, phases []ops.Phase, add func(Hazard))
	// storesOnServer: the scratch stores are built on the server --db names
	// (else in temporary files); without one, noServer is what Skipped says.
	storesOnServer bool
	noServer       string
	// readOnly is the real store's target opened for reading only.
	readOnly func(t dsn.Target) (dsn.Target, error)
}

var dialects = perdialect.Of[dialectRules]{Postgres: postgresRules, SQLite: sqliteRules}

// rulesFor is d's rules, for a dialect Lint has checked.
func rulesFor(d dialect.Dialect) dialectRules { return dialects.Must(d) }
