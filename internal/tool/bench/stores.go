package bench

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/perdialect"
	"github.com/schemastate/schemastate/internal/tool/dsn"
	"github.com/schemastate/schemastate/internal/tool/gen"
	"github.com/schemastate/schemastate/internal/tool/store"

	_ "github.com/schemastate/schemastate/drivers"
)

// Stores hands out the empty databases the benchmark generates its stores
// into, one at a time, always at the same DSN.
type Stores interface {
	Dialect() dialect.Dialect
	// Fresh returns an empty database, replacing the previous one, and the
	// DSN the CLI's --db takes for it. The first call refuses a database
	// that already holds tables (gen.ErrNotEmpty): only what the benchmark
	// generated is ever discarded.
	Fresh(ctx context.Context) (*sql.DB, string, error)
	// Dir is a directory on the disk the store lives on, for the disk-rate
	// probe ("" when that disk is not reachable from here).
	Dir() string
	Close() error
}

// SQLiteStores keeps each store in the file at path, deleted and created
// again for the next store.
func SQLiteStores(path string) Stores {
	return slotAt(dsn.SQLiteTarget(path))
}

// PostgresStores keeps each store in the schema dsn's search_path names (or
// its current schema); for the next store every table in it is dropped.
func PostgresStores(url string) Stores {
	return slotAt(dsn.PostgresTarget(url))
}

// StoresAt is the stores at the --db target t: SQLiteStores of its file,
// PostgresStores of its URL.
func StoresAt(t dsn.Target) (Stores, error) {
	at, err := storesAt.For(t.Dialect)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	return at(t), nil
}

var storesAt = perdialect.Of[func(dsn.Target) Stores]{
	Postgres: func(t dsn.Target) Stores { return PostgresStores(t.DSN) },
	SQLite:   func(t dsn.Target) Stores { return SQLiteStores(t.Path) },
}

// slotAt is the one empty-store builder's slot at t; its first store is
// refused with gen.ErrNotEmpty when t already holds tables.
func slotAt(t dsn.Target) Stores { return slotStores{store.NewSlot(t, gen.ErrNotEmpty)} }

type slotStores struct{ *store.Slot }

func (s slotStores) Fresh(ctx context.Context) (*sql.DB, string, error) {
	st, err := s.Next(ctx)
	if err != nil {
		return nil, "", err
	}
	return st.DB, st.CLIDSN, nil
}
