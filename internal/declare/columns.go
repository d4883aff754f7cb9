// The owned tables' column lists, read from the built-in declaration
// (schema.hcl) as Atlas evaluates it, for the code that writes, copies or
// reads back whole rows (the generator, the benchmark and the tests) instead
// of spelling the columns out again in Go.

package declare

import (
	"fmt"
	"slices"
	"sync"

	"github.com/schemastate/schemastate"
	"github.com/schemastate/schemastate/dialect"
)

// Subagents is the owned table of subagent invocations.
const Subagents = "task_session_subagents"

// amendmentColumn is the column the amendment added to Subagents: the
// pre-amendment table is the declared one without it.
const amendmentColumn = "agent_execution_id"

// builtin is schema.hcl evaluated once, on first use. The column names are
// the same on both dialects (a test pins it); only their types differ.
var builtin = sync.OnceValues(func() (*Declaration, error) {
	return Eval(schemastate.SchemaHCL, "schema.hcl (built in)", dialect.SQLite, "main")
})

// Columns is the owned table's columns in the order schema.hcl declares
// them.
func Columns(table string) ([]string, error) {
	decl, err := builtin()
	if err != nil {
		return nil, fmt.Errorf("declare: %w", err)
	}
	t := decl.Table(table)
	if t == nil {
		return nil, fmt.Errorf("declare: schema.hcl declares no owned table %s", table)
	}
	cols := make([]string, len(t.Columns))
	for i, c := range t.Columns {
		cols[i] = c.Name
	}
	return cols, nil
}

// PreAmendmentColumns is Subagents's columns as the pre-amendment build
// created them (installed-base states 3 and 4): the declared ones, in their
// order, without agent_execution_id.
func PreAmendmentColumns() ([]string, error) {
	cols, err := Columns(Subagents)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(cols, func(c string) bool { return c == amendmentColumn }), nil
}
