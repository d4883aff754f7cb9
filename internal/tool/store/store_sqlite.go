package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/tool/dsn"
)

// sqliteFile is the location of a SQLite store at path: WAL, as every store
// schemastate creates.
func sqliteFile(path string) location {
	t := dsn.SQLiteTarget(path).NewStore()
	return location{target: t, cliDSN: t.Display, schema: "main"}
}

// sqliteArea keeps temporary stores as files in one temporary directory.
type sqliteArea struct{ dir string }

func newSQLiteArea(prefix string) (area, error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return nil, fmt.Errorf("store: temporary directory: %w", err)
	}
	return &sqliteArea{dir: dir}, nil
}

func (a *sqliteArea) dialect() dialect.Dialect { return dialect.SQLite }

func (a *sqliteArea) create(_ context.Context, name string) (location, error) {
	return sqliteFile(filepath.Join(a.dir, name+".db")), nil
}

func (a *sqliteArea) remove() error { return os.RemoveAll(a.dir) }

// sqlitePlace is a slot's file, deleted with its journal and WAL files for
// the next store.
type sqlitePlace struct{ path string }

func newSQLitePlace(t dsn.Target) place { return &sqlitePlace{path: t.Path} }

func (p *sqlitePlace) dir() string { return filepath.Dir(p.path) }

func (p *sqlitePlace) location() location { return sqliteFile(p.path) }

func (p *sqlitePlace) holds(ctx context.Context, db *sql.DB) (string, error) {
	var n int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM sqlite_master`).Scan(&n); err != nil {
		return "", err
	}
	if n == 0 {
		return "", nil
	}
	return fmt.Sprintf("%s holds %d schema objects", p.path, n), nil
}

func (p *sqlitePlace) empty(_ context.Context, st *Store) (*Store, error) {
	st.Close()
	for _, suffix := range []string{"", "-wal", "-shm", "-journal"} {
		if err := os.Remove(p.path + suffix); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("store: remove the previous store: %w", err)
		}
	}
	return nil, nil
}
