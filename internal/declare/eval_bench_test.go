package declare_test

import (
	"testing"

	"github.com/schemastate/schemastate"
	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/declare"
)

// BenchmarkEval_BuiltIn evaluates the built-in schema.hcl, as every boot
// that takes the full check does once.
//
//	go test -run '^$' -bench Eval_BuiltIn ./internal/declare
func BenchmarkEval_BuiltIn(b *testing.B) {
	for i := 0; i < b.N; i++ {
		if _, err := declare.Eval(schemastate.SchemaHCL, "x", dialect.SQLite, "main"); err != nil {
			b.Fatal(err)
		}
	}
}
