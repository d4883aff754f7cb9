package reconcile

import (
	"fmt"
	"os"
	"strings"

	"ariga.io/atlas/sql/schema"
	"github.com/zclconf/go-cty/cty"

	"github.com/schemastate/schemastate"
	"github.com/schemastate/schemastate/dialect"
)

// hostMarker starts the comment of a table declared only as a foreign-key
// target. Such tables belong to the host and are never inspected or changed.
const hostMarker = "host:"

// Declaration is schema.hcl evaluated for one dialect.
type Declaration struct {
	// Owned are the tables the reconciler manages, in file order.
	Owned []*schema.Table
	// Host are tables declared only as foreign-key targets.
	Host []*schema.Table
	// File names where the declaration came from, for error messages.
	File string
}

// Owned returns the named owned table, or nil.
func (d *Declaration) Table(name string) *schema.Table {
	for _, t := range d.Owned {
		if t.Name == name {
			return t
		}
	}
	return nil
}

// LoadDeclaration reads and evaluates an HCL file for d; an empty path means
// the schema.hcl built into this module.
func LoadDeclaration(path string, d dialect.Dialect, schemaName string) (*Declaration, error) {
	drv, err := driverFor(d)
	if err != nil {
		return nil, err
	}
	src, file, err := readDeclaration(path)
	if err != nil {
		return nil, err
	}
	return evalDeclaration(drv, src, file, schemaName)
}

// readDeclaration returns the HCL source and the name to cite it by.
func readDeclaration(path string) (src []byte, file string, err error) {
	if path == "" {
		return schemastate.SchemaHCL, "schema.hcl (built in)", nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, "", fmt.Errorf("read declared shape: %w", err)
	}
	return b, path, nil
}

// EvalDeclaration evaluates HCL source for dialect d and binds every table to
// the live schema name (main on SQLite, the current schema on PostgreSQL).
func EvalDeclaration(src []byte, file string, d dialect.Dialect, schemaName string) (*Declaration, error) {
	drv, err := driverFor(d)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return evalDeclaration(drv, src, file, schemaName)
}

func evalDeclaration(drv driver, src []byte, file string, schemaName string) (*Declaration, error) {
	var s schema.Schema
	vars := map[string]cty.Value{"dialect": cty.StringVal(string(drv.dialect()))}
	if err := drv.evalHCL(src, &s, vars); err != nil {
		// hcl diagnostics on in-memory source carry ":line,col" with no file
		// name: prefix the file so the message reads "file:line,col: …".
		if strings.HasPrefix(err.Error(), ":") {
			return nil, fmt.Errorf("%s%w", file, err)
		}
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	s.Name = schemaName
	decl := &Declaration{File: file}
	for _, t := range s.Tables {
		t.Schema = &s
		if isHost(t) {
			decl.Host = append(decl.Host, t)
			continue
		}
		drv.declared(t)
		decl.Owned = append(decl.Owned, t)
	}
	if len(decl.Owned) == 0 {
		return nil, fmt.Errorf("%s: declares no owned table", file)
	}
	if err := checkDeclaration(decl, src, schemaName); err != nil {
		return nil, err
	}
	s.Tables = decl.Owned
	return decl, nil
}

func isHost(t *schema.Table) bool {
	for _, a := range t.Attrs {
		if c, ok := a.(*schema.Comment); ok && strings.HasPrefix(strings.TrimSpace(c.Text), hostMarker) {
			return true
		}
	}
	return false
}

// HostTables lists every host table the module depends on: the foreign-key
// targets declared in schema.hcl plus the tables the keys and the backfill read.
func (d *Declaration) HostTables() []string {
	names := []string{"kandev_meta", "task_session_messages"}
	for _, t := range d.Host {
		names = append(names, t.Name)
	}
	return names
}
