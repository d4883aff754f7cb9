package bench

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"ariga.io/atlas/sql/schema"
	"github.com/zclconf/go-cty/cty"

	"github.com/schemastate/schemastate"
	"github.com/schemastate/schemastate/internal/readonly"
	"github.com/schemastate/schemastate/internal/tool/dsn"
)

// The Atlas anchor: what `atlas schema apply --include task_session_subagents`
// does with the same schema.hcl, through Atlas's Go API and its defaults —
// evaluate the HCL, inspect the live table, diff, then apply the changes in
// one transaction opened the way its client opens one (on SQLite
// sqlite.OpenTx: foreign keys off, a whole-database foreign_key_check before
// and after; on PostgreSQL a plain BEGIN), ApplyChanges, COMMIT. It runs on
// its own one-connection pool, as the CLI would on its own client; opening
// the pool is not timed (ours is not timed opening one either).

const subagents = "task_session_subagents"

// atlasDesired evaluates schema.hcl with Atlas alone and keeps the owned
// table, bound to schema name.
func (b *bench) atlasDesired(name string) (*schema.Schema, error) {
	var s schema.Schema
	vars := map[string]cty.Value{"dialect": cty.StringVal(string(b.d))}
	if err := b.on.atlasEval(schemastate.SchemaHCL, &s, vars); err != nil {
		return nil, err
	}
	t, ok := s.Table(subagents)
	if !ok {
		return nil, fmt.Errorf("%w: schema.hcl declares no %s", errUnexpected, subagents)
	}
	s.Name = name
	for _, tt := range s.Tables {
		tt.Schema = &s
	}
	s.Tables = []*schema.Table{t}
	return &s, nil
}

func (b *bench) atlasApply(ctx context.Context) (time.Duration, error) {
	t, err := dsn.Parse(b.dsn)
	if err != nil {
		return 0, err
	}
	t = t.NewStore() // the bench's own store: WAL on SQLite, as it was made
	db, err := sql.Open(t.DriverName, t.DSN)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	name, err := readonly.SchemaName(ctx, db, b.d)
	if err != nil {
		return 0, err
	}
	t0 := time.Now()
	desired, err := b.atlasDesired(name)
	if err != nil {
		return 0, err
	}
	drv, err := b.on.atlasOpen(db)
	if err != nil {
		return 0, err
	}
	current, err := drv.InspectSchema(ctx, name, &schema.InspectOptions{Tables: []string{subagents}})
	if err != nil {
		return 0, err
	}
	changes, err := drv.SchemaDiff(current, desired)
	if err != nil {
		return 0, err
	}
	tx, err := b.on.atlasTx(ctx, db, nil)
	if err != nil {
		return 0, err
	}
	tdrv, err := b.on.atlasOpen(tx)
	if err != nil {
		tx.Rollback() //nolint:errcheck
		return 0, err
	}
	if err := tdrv.ApplyChanges(ctx, changes); err != nil {
		tx.Rollback() //nolint:errcheck
		return 0, fmt.Errorf("atlas ApplyChanges: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("atlas commit: %w", err)
	}
	return time.Since(t0), nil
}

// atlasInspect is Atlas's inspection of the owned table alone.
func (b *bench) atlasInspect(ctx context.Context, name string) error {
	drv, err := b.on.atlasOpen(b.db)
	if err != nil {
		return err
	}
	_, err = drv.InspectSchema(ctx, name, &schema.InspectOptions{Tables: []string{subagents}})
	return err
}
