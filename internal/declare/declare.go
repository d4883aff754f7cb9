// Package declare evaluates schema.hcl for a dialect: the owned tables the
// reconcile manages, the host tables declared only as foreign-key targets,
// and every name in it held to the identifier rules (internal/ident), cited
// by its position in the file when refused.
package declare

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"ariga.io/atlas/sql/schema"
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"

	"github.com/schemastate/schemastate"
	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/endstate"
	"github.com/schemastate/schemastate/internal/ident"
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

// Table returns the named owned table, or nil.
func (d *Declaration) Table(name string) *schema.Table {
	for _, t := range d.Owned {
		if t.Name == name {
			return t
		}
	}
	return nil
}

// Load reads and evaluates an HCL file for d; an empty path means
// the schema.hcl built into this module.
func Load(path string, d dialect.Dialect, schemaName string) (*Declaration, error) {
	src, file, err := Read(path)
	if err != nil {
		return nil, err
	}
	return Eval(src, file, d, schemaName)
}

// Read returns the HCL source and the name to cite it by.
func Read(path string) (src []byte, file string, err error) {
	if path == "" {
		return schemastate.SchemaHCL, "schema.hcl (built in)", nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, "", fmt.Errorf("read declared shape: %w", err)
	}
	return b, path, nil
}

// Eval evaluates HCL source for dialect d and binds every table to the live
// schema name (main on SQLite, the current schema on PostgreSQL).
func Eval(src []byte, file string, d dialect.Dialect, schemaName string) (*Declaration, error) {
	dd, err := dialects.For(d)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	var s schema.Schema
	vars := map[string]cty.Value{"dialect": cty.StringVal(string(d))}
	if err := dd.evalHCL(src, &s, vars); err != nil {
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
		if dd.declared != nil {
			dd.declared(t)
		}
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

// EndState is AC-33's end state of the declared task_session_subagents
// itself: what a store reconciled to this declaration observes, and so
// whether a reconcile to it writes execution_since (clauses 1–3).
func (d *Declaration) EndState() endstate.Facts {
	t := d.Table(endstate.Table)
	return endstate.Observe(t, t)
}

// checkDeclaration holds every name of the evaluated declaration to
// ident.Plain: the schema the reconcile works in, and each table's names
// (ident.TableNames), owned and host alike. A name refused is cited by its
// position in the file (declaredAt).
func checkDeclaration(decl *Declaration, src []byte, schemaName string) error {
	if !ident.Plain(schemaName) {
		return fmt.Errorf("%s: %w (the schema the reconcile works in)", decl.File, ident.NameError("schema", schemaName))
	}
	for _, t := range slices.Concat(decl.Owned, decl.Host) {
		err := ident.TableNames(t, func(kind, name string) error {
			if ident.Plain(name) {
				return nil
			}
			return fmt.Errorf("%s: %w", declaredAt(src, decl.File, name), ident.NameError(kind, name))
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// declaredAt is "file:line,col" of the block labelled name (table "…",
// column "…", index "…"), as HCL's own diagnostics cite a position; failing
// that, of the first line that holds the name; else the file alone.
func declaredAt(src []byte, file, name string) string {
	if f, diags := hclsyntax.ParseConfig(src, file, hcl.InitialPos); !diags.HasErrors() {
		if body, ok := f.Body.(*hclsyntax.Body); ok {
			if r, ok := labelled(body, name); ok {
				return fmt.Sprintf("%s:%d,%d", file, r.Start.Line, r.Start.Column)
			}
		}
	}
	for i, line := range strings.Split(string(src), "\n") {
		if strings.Contains(line, name) {
			return fmt.Sprintf("%s:%d", file, i+1)
		}
	}
	return file
}

// labelled finds, depth first, the first block with a label equal to name.
func labelled(body *hclsyntax.Body, name string) (hcl.Range, bool) {
	for _, b := range body.Blocks {
		for i, l := range b.Labels {
			if l == name {
				return b.LabelRanges[i], true
			}
		}
		if r, ok := labelled(b.Body, name); ok {
			return r, true
		}
	}
	return hcl.Range{}, false
}
