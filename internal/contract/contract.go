// Package contract is what the module's writers write, as data: for each
// owned table, the columns a writer's statements list, which of them it may
// write NULL or ” (and for which frames), the values it is bounded to, its
// conflict target and the rows it relies on existing first. It is read from
// writers.json (the root package embeds this release's; `git show
// REF:writers.json` is another release's), judged against a table — the
// declared one (lint, the reconcile's shape step) or the live one (the
// writer's start) — and the writers' code is built from it (capture's
// upsert) or tested equal to it (transcript's lifecycle statements).
package contract

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/schemastate/schemastate"
)

// Format is the format tag of the writers.json this package reads.
const Format = "schemastate-writers/1"

// File is the contract's path in the repository (and what errors cite).
const File = "writers.json"

// Contract is a release's writers.
type Contract struct {
	Format  string   `json:"format"`
	Writers []Writer `json:"writers"`
	// Source names where it was read from ("writers.json (built in)",
	// "HEAD~1:writers.json").
	Source string `json:"-"`
}

// Writer is one writer of one table.
type Writer struct {
	// Name is the writer's package ("capture", "transcript").
	Name  string `json:"name"`
	About string `json:"about,omitempty"`
	Table string `json:"table"`
	// Insert lists the columns its INSERT names, in the statement's order.
	Insert []string `json:"insert"`
	// Update lists the columns its conflict clause or UPDATEs set.
	Update []string `json:"update,omitempty"`
	// Conflict is its ON CONFLICT target: a unique key over exactly these
	// columns must exist, or every insert fails.
	Conflict []string `json:"conflict,omitempty"`
	// After are the foreign keys whose referenced row the writer relies on
	// existing before it writes (the order it needs).
	After []Ref `json:"after,omitempty"`
	// Columns says what it writes in each column it names.
	Columns []Column `json:"columns"`
}

// Ref is a column whose value names a row of another table.
type Ref struct {
	Column string `json:"column,omitempty"`
	Table  string `json:"table"`
	Ref    string `json:"ref"`
	Why    string `json:"why"`
}

// Column is what a writer writes in one column. An empty Null or Empty
// means it never writes NULL or ”; otherwise the text says for which
// frames (or rows) it does.
type Column struct {
	Name string `json:"name"`
	// Null: the frames for which the writer writes NULL.
	Null string `json:"null,omitempty"`
	// Empty: the frames for which it writes ''.
	Empty string `json:"empty,omitempty"`
	// Values, when set, are the only values it writes (as SQL literals'
	// text: "0", "live").
	Values []string `json:"values,omitempty"`
	// Min, when set, is the least number it writes; MinFrames says which
	// frames write it.
	Min       *int64 `json:"min,omitempty"`
	MinFrames string `json:"min_frames,omitempty"`
	// Generated says how the writer makes the value itself (a random UUID
	// per insert: no two inserts share it).
	Generated string `json:"generated,omitempty"`
	// Precedes: the value may name a row of that table before the row
	// exists, so no foreign key may require it.
	Precedes *Ref `json:"precedes,omitempty"`
}

// Builtin is this release's contract, as built into the binary: parsed
// once, shared by every caller, which must not change it.
func Builtin() (*Contract, error) { return builtin() }

var builtin = sync.OnceValues(func() (*Contract, error) {
	return Parse(schemastate.WritersJSON, File+" (built in)")
})

// Parse reads a writers.json; source names it in errors. Unknown fields
// are refused, so a misspelt bound is never silently no bound.
func Parse(b []byte, source string) (*Contract, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var c Contract
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("%s: %w", source, jsonError(b, err))
	}
	c.Source = source
	if c.Format != Format {
		return nil, fmt.Errorf("%s: format %q, want %q", source, c.Format, Format)
	}
	for _, w := range c.Writers {
		if err := w.validate(); err != nil {
			return nil, fmt.Errorf("%s: writer %q: %w", source, w.Name, err)
		}
	}
	return &c, nil
}

// jsonError adds the line and column of a syntax or type error.
func jsonError(b []byte, err error) error {
	var off int64
	switch e := err.(type) {
	case *json.SyntaxError:
		off = e.Offset
	case *json.UnmarshalTypeError:
		off = e.Offset
	default:
		return err
	}
	line, col := 1, 1
	for _, c := range b[:min(int(off), len(b))] {
		if c == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
	}
	return fmt.Errorf("line %d, column %d: %w", line, col, err)
}

// validate checks that every column a statement names is described, once.
func (w Writer) validate() error {
	if w.Name == "" || w.Table == "" {
		return fmt.Errorf("a writer needs a name and a table")
	}
	seen := map[string]bool{}
	for _, c := range w.Columns {
		if seen[c.Name] {
			return fmt.Errorf("column %s described twice", c.Name)
		}
		seen[c.Name] = true
	}
	for _, list := range [][]string{w.Insert, w.Update, w.Conflict} {
		for _, name := range list {
			if !seen[name] {
				return fmt.Errorf("column %s is named by a statement but not described in columns", name)
			}
		}
	}
	for _, r := range w.After {
		if !slices.Contains(w.Insert, r.Column) {
			return fmt.Errorf("after: column %s is not inserted", r.Column)
		}
	}
	return nil
}

// Writer returns the named writer, or nil.
func (c *Contract) Writer(name string) *Writer {
	for i := range c.Writers {
		if c.Writers[i].Name == name {
			return &c.Writers[i]
		}
	}
	return nil
}

// Column returns the named column's description, or nil.
func (w *Writer) Column(name string) *Column {
	for i := range w.Columns {
		if w.Columns[i].Name == name {
			return &w.Columns[i]
		}
	}
	return nil
}

// Writes reports whether the writer's statements name column.
func (w *Writer) Writes(column string) bool {
	return slices.Contains(w.Insert, column) || slices.Contains(w.Update, column)
}

// SplitList splits a statement's comma-separated column list ("a, b,\n\tc")
// into its names: what a writer's test compares with the contract.
func SplitList(list string) []string {
	var out []string
	for _, n := range strings.Split(list, ",") {
		out = append(out, strings.TrimSpace(n))
	}
	return out
}
