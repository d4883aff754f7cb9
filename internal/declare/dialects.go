package declare

import (
	"ariga.io/atlas/sql/postgres"
	"ariga.io/atlas/sql/schema"
	"ariga.io/atlas/sql/sqlite"
	"github.com/zclconf/go-cty/cty"

	"github.com/schemastate/schemastate/internal/perdialect"
)

// dialects are how each dialect evaluates schema.hcl, and what it makes of
// a declared table afterwards (nil: nothing).
var dialects = perdialect.Of[evaluator]{
	SQLite:   evaluator{evalHCL: sqlite.EvalHCLBytes},
	Postgres: evaluator{evalHCL: postgres.EvalHCLBytes, declared: UniqueConstraints},
}

type evaluator struct {
	evalHCL  func(src []byte, v any, vars map[string]cty.Value) error
	declared func(t *schema.Table)
}

// UniqueConstraints makes each unique index of a declared PostgreSQL table a
// UNIQUE constraint, which is what a unique index in the declaration is on
// PostgreSQL (schema.hcl header; atlas-and-dialect-facts.md).
func UniqueConstraints(t *schema.Table) {
	for _, idx := range t.Indexes {
		if idx.Unique {
			idx.AddAttrs(postgres.UniqueConstraint(idx.Name))
		}
	}
}
