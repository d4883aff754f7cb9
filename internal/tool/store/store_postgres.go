package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"time"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/readonly"
	"github.com/schemastate/schemastate/internal/tool/dsn"
)

// postgresArea keeps temporary stores as schemas on one server.
type postgresArea struct {
	server  dsn.Target
	admin   *sql.DB
	schemas []string
}

func newPostgresArea(ctx context.Context, server dsn.Target, _ string) (area, error) {
	admin, err := server.Open(ctx)
	if err != nil {
		return nil, err
	}
	return &postgresArea{server: server, admin: admin}, nil
}

func (a *postgresArea) dialect() dialect.Dialect { return dialect.Postgres }

func (a *postgresArea) create(ctx context.Context, name string) (location, error) {
	if _, err := a.admin.ExecContext(ctx, "CREATE SCHEMA "+dialect.QuoteIdent(name)); err != nil {
		return location{}, fmt.Errorf("store: create the scratch schema %s (the stores are built in temporary schemas: build them on a server where that is allowed): %w", name, err)
	}
	a.schemas = append(a.schemas, name)
	u, err := url.Parse(a.server.DSN)
	if err != nil {
		return location{}, fmt.Errorf("store: server URL: %w", err)
	}
	q := u.Query()
	q.Set("search_path", name)
	u.RawQuery = q.Encode()
	t := a.server
	t.DSN = u.String()
	return location{target: t, cliDSN: t.DSN, schema: name}, nil
}

func (a *postgresArea) remove() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var errs []error
	for _, s := range a.schemas {
		if _, err := a.admin.ExecContext(ctx, "DROP SCHEMA IF EXISTS "+dialect.QuoteIdent(s)+" CASCADE"); err != nil {
			errs = append(errs, fmt.Errorf("store: drop schema %s: %w", s, err))
		}
	}
	return errors.Join(append(errs, a.admin.Close())...)
}

// postgresPlace is a slot's schema (the URL's search_path, or its current
// schema), whose tables are dropped for the next store.
type postgresPlace struct{ t dsn.Target }

func newPostgresPlace(t dsn.Target) place { return &postgresPlace{t: t} }

// dir: the server is on this machine in the setups the benchmark documents;
// the temporary directory is on its disk there. Elsewhere a probe measures
// this machine's disk.
func (p *postgresPlace) dir() string { return os.TempDir() }

func (p *postgresPlace) location() location { return location{target: p.t, cliDSN: p.t.DSN} }

func (p *postgresPlace) holds(ctx context.Context, db *sql.DB) (string, error) {
	tables, err := p.tables(ctx, db)
	if err != nil || len(tables) == 0 {
		return "", err
	}
	return fmt.Sprintf("the schema holds %d tables", len(tables)), nil
}

func (p *postgresPlace) tables(ctx context.Context, db *sql.DB) ([]string, error) {
	return readonly.Strings(ctx, db, `SELECT quote_ident(schemaname) || '.' || quote_ident(tablename) FROM pg_tables WHERE schemaname = current_schema()`)
}

func (p *postgresPlace) empty(ctx context.Context, st *Store) (*Store, error) {
	tables, err := p.tables(ctx, st.DB)
	if err != nil {
		return st, err
	}
	for _, t := range tables {
		if _, err := st.ExecContext(ctx, "DROP TABLE IF EXISTS "+t+" CASCADE"); err != nil {
			return st, fmt.Errorf("store: drop the previous store: %w", err)
		}
	}
	return st, nil
}
