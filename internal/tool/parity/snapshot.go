// Package parity checks the design's central promise: a database migrated
// from any installed-base state ends with the same owned tables as a fresh
// one. It builds stores (fresh, pre-amendment, amended by the host's own DDL),
// reconciles each, reads every owned table back through Atlas's inspector, and
// compares columns, primary keys, index sets, unique, foreign-key and check
// constraints. It also compares a live database with a fresh reconcile (a
// drift report that reads the live database and changes nothing in it).
package parity

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"

	"ariga.io/atlas/sql/migrate"
	"ariga.io/atlas/sql/schema"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/declare"
	"github.com/schemastate/schemastate/internal/describe"
	"github.com/schemastate/schemastate/internal/perdialect"
	"github.com/schemastate/schemastate/internal/readonly"
)

// Snapshot is the shape of every owned table of one database, as its catalog
// reports it. A declared table the database does not have is absent from
// Tables.
type Snapshot struct {
	Dialect dialect.Dialect   `json:"dialect"`
	Tables  map[string]*Table `json:"tables"`
}

// Table is one owned table's shape, each list sorted so that two snapshots
// compare element by element.
type Table struct {
	Columns     []Column     `json:"columns"`
	PrimaryKey  []string     `json:"primary_key"`
	Indexes     []Index      `json:"indexes"`
	ForeignKeys []ForeignKey `json:"foreign_keys"`
	Checks      []Check      `json:"checks"`
}

// Check is a CHECK constraint: its name (empty when SQLite has none for it)
// and its expression as the catalog renders it.
type Check struct {
	Name string `json:"name"`
	Expr string `json:"expr"`
}

func (c Check) key() string {
	if c.Name != "" {
		return c.Name
	}
	return "(unnamed) CHECK " + c.Expr
}

// Column is a column's name, type (as the dialect spells it; case-folded on
// SQLite, where type names are case-insensitive), nullability and default.
type Column struct {
	Name     string  `json:"name"`
	Type     string  `json:"type"`
	Nullable bool    `json:"nullable"`
	Default  *string `json:"default"`
}

// Index is an index or a unique constraint (both are inspected as indexes),
// read with the reconcile's describer (internal/describe).
type Index struct {
	// Name is empty for a SQLite autoindex (an inline UNIQUE constraint):
	// SQLite names it sqlite_autoindex_<table>_N, which is no name of its
	// own, so it is compared by uniqueness, columns and order only.
	Name   string `json:"name"`
	Unique bool   `json:"unique"`
	// Constraint: a PostgreSQL UNIQUE constraint, not only a unique index.
	// (On SQLite an inline UNIQUE is an autoindex: see Name.)
	Constraint bool `json:"constraint"`
	// Columns in index order; a descending part ends in " DESC", an
	// expression is written as the catalog renders it.
	Columns   []string `json:"columns"`
	Predicate string   `json:"predicate,omitempty"`
}

// ForeignKey is a foreign-key constraint, as reconcile describes it. Name is
// empty on SQLite when the constraint was declared without one; such a key is
// compared by what it covers and references.
type ForeignKey describe.ForeignKeyDescription

// Read inspects db's owned tables — those the declaration names (schemaFile,
// or the built-in schema.hcl when empty) — in the connection's schema. It
// only reads.
func Read(ctx context.Context, db *sql.DB, schemaFile string) (*Snapshot, error) {
	d, err := dialect.Detect(db)
	if err != nil {
		return nil, err
	}
	in, err := inspectors.For(d)
	if err != nil {
		return nil, fmt.Errorf("parity: %w", err)
	}
	name, err := readonly.SchemaName(ctx, db, d)
	if err != nil {
		return nil, fmt.Errorf("read the current schema: %w", err)
	}
	decl, err := declare.Load(schemaFile, d, name)
	if err != nil {
		return nil, err
	}
	drv, err := in.open(db)
	if err != nil {
		return nil, fmt.Errorf("open the inspector: %w", err)
	}
	var names []string
	for _, t := range decl.Owned {
		names = append(names, t.Name)
	}
	live, err := drv.InspectSchema(ctx, name, &schema.InspectOptions{Tables: names})
	if err != nil {
		return nil, fmt.Errorf("inspect %s: %w", strings.Join(names, ", "), err)
	}
	s := &Snapshot{Dialect: d, Tables: map[string]*Table{}}
	for _, t := range live.Tables {
		if s.Tables[t.Name], err = readTable(in, t); err != nil {
			return nil, fmt.Errorf("table %s: %w", t.Name, err)
		}
	}
	return s, nil
}

func readTable(in inspector, t *schema.Table) (*Table, error) {
	out := &Table{Columns: []Column{}, PrimaryKey: []string{}, Indexes: []Index{}, ForeignKeys: []ForeignKey{}, Checks: []Check{}}
	for _, a := range t.Attrs {
		if c, ok := a.(*schema.Check); ok {
			out.Checks = append(out.Checks, Check{Name: c.Name, Expr: c.Expr})
		}
	}
	sortBy(out.Checks, Check.key)
	for _, c := range t.Columns {
		typ, err := formatType(in, c.Type)
		if err != nil {
			return nil, fmt.Errorf("column %s: %w", c.Name, err)
		}
		out.Columns = append(out.Columns, Column{Name: c.Name, Type: typ, Nullable: c.Type.Null, Default: exprString(c.Default)})
	}
	sortBy(out.Columns, func(c Column) string { return c.Name })
	if t.PrimaryKey != nil {
		out.PrimaryKey = describe.Index(t.PrimaryKey).Parts
	}
	for _, idx := range t.Indexes {
		desc := describe.Index(idx)
		out.Indexes = append(out.Indexes, Index{Name: in.indexName(idx.Name), Unique: desc.Unique, Constraint: desc.Constraint, Columns: desc.Parts, Predicate: desc.Predicate})
	}
	sortBy(out.Indexes, Index.key)
	for _, fk := range t.ForeignKeys {
		f := ForeignKey(describe.ForeignKey(fk))
		f.Name = in.foreignKeyName(fk.Symbol)
		if fk.RefTable == nil { // an unresolved parent: "", not the describer's "?"

			f.RefTable = ""
		}
		out.ForeignKeys = append(out.ForeignKeys, f)
	}
	sortBy(out.ForeignKeys, ForeignKey.key)
	return out, nil
}

// sortBy sorts s by key: each list of a Table is in key order, so that two
// snapshots compare element by element.
func sortBy[T any](s []T, key func(T) string) {
	slices.SortFunc(s, func(a, b T) int { return strings.Compare(key(a), key(b)) })
}

func formatType(in inspector, ct *schema.ColumnType) (string, error) {
	if ct == nil || ct.Type == nil {
		return "", nil
	}
	return in.formatType(ct.Type)
}

// inspector is how Read reads one dialect's catalog (snapshot_<dialect>.go).
type inspector struct {
	// open is Atlas's inspector over db.
	open func(db *sql.DB) (migrate.Driver, error)
	// formatType spells a column type as the snapshot compares it.
	formatType func(schema.Type) (string, error)
	// indexName and foreignKeyName are the names compared: "" for a name
	// the database made up rather than the DDL gave.
	indexName, foreignKeyName func(string) string
	// referenceOnServer: the fresh store Against compares with is built on
	// Config.Server (else in a temporary file, and Server is not used).
	referenceOnServer bool
}

var inspectors = perdialect.Of[inspector]{Postgres: postgresInspector, SQLite: sqliteInspector}

func exprString(e schema.Expr) *string {
	if e == nil {
		return nil
	}
	s := describe.Expr(e)
	return &s
}

// key identifies an index for pairing across snapshots: by name, or for a
// nameless SQLite autoindex by what it covers.
func (x Index) key() string {
	if x.Name != "" {
		return x.Name
	}
	return "(unnamed) " + x.describe()
}

func (x Index) describe() string {
	kind := "index"
	switch {
	case x.Unique && x.Constraint:
		kind = "unique constraint"
	case x.Unique:
		kind = "unique index"
	}
	s := fmt.Sprintf("%s (%s)", kind, strings.Join(x.Columns, ", "))
	if x.Predicate != "" {
		s += " WHERE " + x.Predicate
	}
	return s
}

func (f ForeignKey) key() string {
	if f.Name != "" {
		return f.Name
	}
	return "(unnamed) " + f.describe()
}

func (f ForeignKey) describe() string {
	return fmt.Sprintf("(%s) REFERENCES %s (%s) ON UPDATE %s ON DELETE %s", strings.Join(f.Columns, ", "),
		f.RefTable, strings.Join(f.RefColumns, ", "), orDefault(f.OnUpdate), orDefault(f.OnDelete))
}

func orDefault(s string) string {
	if s == "" {
		return "NO ACTION"
	}
	return s
}

func (c Column) describe() string {
	s := c.Type + " NULL"
	if !c.Nullable {
		s = c.Type + " NOT NULL"
	}
	if c.Default != nil {
		s += " DEFAULT " + *c.Default
	}
	return s
}
