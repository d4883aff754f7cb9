package reconcile

import (
	"fmt"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/perdialect"
	"github.com/schemastate/schemastate/reconcile/internal/core"
	"github.com/schemastate/schemastate/reconcile/internal/postgres"
	"github.com/schemastate/schemastate/reconcile/internal/sqlite"
)

// driverFor is the dialect's driver; an unknown dialect is an error.
func driverFor(d dialect.Dialect) (core.Driver, error) {
	drv, err := drivers.For(d)
	if err != nil {
		return nil, fmt.Errorf("reconcile: %w", err)
	}
	return drv, nil
}

var drivers = perdialect.Of[core.Driver]{Postgres: postgres.Driver{}, SQLite: sqlite.Driver{}}
