// Package schemastate owns the durable record of every subagent an agent fans
// out to (task_session_subagents) and the declared shape that the reconciler
// keeps it in. The declared shape is schema.hcl, embedded here.
package schemastate

import _ "embed"

// SchemaHCL is the declared shape (schema.hcl), as built into this binary.
//
//go:embed schema.hcl
var SchemaHCL []byte

// WritersJSON is what this release's writers write, as data (writers.json):
// read by internal/contract, judged against a declaration by lint and the
// reconcile, and against the live table by the writer's start.
//
//go:embed writers.json
var WritersJSON []byte
