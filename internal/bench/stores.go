package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/dsn"
	"github.com/schemastate/schemastate/internal/gen"

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
func SQLiteStores(path string) Stores { return &sqliteStores{path: path} }

type sqliteStores struct {
	path  string
	db    *sql.DB
	fresh bool
}

func (s *sqliteStores) Dialect() dialect.Dialect { return dialect.SQLite }

func (s *sqliteStores) Dir() string { return filepath.Dir(s.path) }

func (s *sqliteStores) Fresh(ctx context.Context) (*sql.DB, string, error) {
	if s.db != nil {
		s.db.Close()
		s.db = nil
	}
	if s.fresh {
		for _, suffix := range []string{"", "-wal", "-shm", "-journal"} {
			if err := os.Remove(s.path + suffix); err != nil && !errors.Is(err, os.ErrNotExist) {
				return nil, "", fmt.Errorf("bench: remove the previous store: %w", err)
			}
		}
	}
	t, err := dsn.Parse("sqlite:" + s.path)
	if err != nil {
		return nil, "", err
	}
	// A store the bench makes is WAL, as every store schemastate creates.
	db, err := t.NewStore().Open(ctx)
	if err != nil {
		return nil, "", err
	}
	if !s.fresh {
		var n int
		if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM sqlite_master`).Scan(&n); err != nil {
			db.Close()
			return nil, "", err
		}
		if n > 0 {
			db.Close()
			return nil, "", fmt.Errorf("%w: %s holds %d schema objects", gen.ErrNotEmpty, s.path, n)
		}
	}
	s.db, s.fresh = db, true
	return db, t.Display, nil
}

func (s *sqliteStores) Close() error {
	if s.db != nil {
		return s.db.Close()
	}
	return nil
}

// PostgresStores keeps each store in the schema dsn's search_path names (or
// its current schema); for the next store every table in it is dropped.
func PostgresStores(dsn string) Stores { return &pgStores{dsn: dsn} }

type pgStores struct {
	dsn   string
	db    *sql.DB
	fresh bool
}

func (s *pgStores) Dialect() dialect.Dialect { return dialect.Postgres }

// Dir: the server is on this machine in the setups the doc lists; the temp
// directory is on its disk there. Elsewhere the probe measures this
// machine's disk, which the report says.
func (s *pgStores) Dir() string { return os.TempDir() }

func (s *pgStores) Fresh(ctx context.Context) (*sql.DB, string, error) {
	if s.db == nil {
		t, err := dsn.Parse(s.dsn)
		if err != nil {
			return nil, "", err
		}
		if s.db, err = t.Open(ctx); err != nil {
			return nil, "", err
		}
	}
	var tables []string
	rows, err := s.db.QueryContext(ctx, `SELECT quote_ident(schemaname) || '.' || quote_ident(tablename) FROM pg_tables WHERE schemaname = current_schema()`)
	if err != nil {
		return nil, "", err
	}
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			rows.Close()
			return nil, "", err
		}
		tables = append(tables, t)
	}
	rows.Close()
	if len(tables) > 0 && !s.fresh {
		return nil, "", fmt.Errorf("%w: the schema holds %d tables", gen.ErrNotEmpty, len(tables))
	}
	for _, t := range tables {
		if _, err := s.db.ExecContext(ctx, "DROP TABLE IF EXISTS "+t+" CASCADE"); err != nil {
			return nil, "", fmt.Errorf("bench: drop the previous store: %w", err)
		}
	}
	s.fresh = true
	return s.db, s.dsn, nil
}

func (s *pgStores) Close() error {
	if s.db != nil {
		return s.db.Close()
	}
	return nil
}
