// Package schemastate owns the durable record of every subagent an agent fans
// out to (task_session_subagents) and the declared shape that the reconciler
// keeps it in. The declared shape is schema.hcl, embedded here.
package schemastate

import (
	"embed"
	"fmt"
)

// SchemaHCL is the declared shape (schema.hcl), as built into this binary.
//
//go:embed schema.hcl
var SchemaHCL []byte

//go:embed testdata/host/*.sql testdata/legacy/*.sql
var fixtures embed.FS

// HostFixture returns the minimal host tables (task_sessions,
// task_session_turns, task_session_messages, kandev_meta) for a dialect
// ("sqlite" or "postgres"). It exists for tests and demos: these tables belong
// to the host and are never created by a reconcile.
func HostFixture(dialect string) (string, error) { return fixture("host", dialect) }

// LegacyFixture returns the pre-amendment task_session_subagents DDL
// (installed-base state 3) for a dialect.
func LegacyFixture(dialect string) (string, error) { return fixture("legacy", dialect) }

func fixture(kind, dialect string) (string, error) {
	b, err := fixtures.ReadFile("testdata/" + kind + "/" + dialect + ".sql")
	if err != nil {
		return "", fmt.Errorf("no %s fixture for dialect %q", kind, dialect)
	}
	return string(b), nil
}
