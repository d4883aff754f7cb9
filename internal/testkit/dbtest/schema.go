package dbtest

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate"
	"github.com/schemastate/schemastate/internal/contract"
)

// BuiltinWriter is the writer named name in the built-in writers.json,
// failing t when the contract does not parse or names no such writer.
func BuiltinWriter(t testing.TB, name string) *contract.Writer {
	t.Helper()
	c, err := contract.Builtin()
	require.NoError(t, err)
	w := c.Writer(name)
	require.NotNil(t, w, "writers.json has no writer %q", name)
	return w
}

// EditedWriters is the built-in writers.json, read afresh (a copy no other
// caller shares) and named source, with edit applied to its capture writer:
// a release whose writer differs from this one's.
func EditedWriters(t testing.TB, source string, edit func(w *contract.Writer)) *contract.Contract {
	t.Helper()
	var c contract.Contract
	require.NoError(t, json.Unmarshal(schemastate.WritersJSON, &c))
	c.Source = source
	edit(c.Writer("capture"))
	return &c
}

// EditedSchema is the built-in schema.hcl with one edit a platform engineer
// might make: old, which must occur exactly once, replaced by new.
func EditedSchema(t testing.TB, old, new string) []byte {
	t.Helper()
	src := string(schemastate.SchemaHCL)
	require.Equal(t, 1, strings.Count(src, old), "the edit's anchor must occur once in schema.hcl: %q", old)
	return []byte(strings.Replace(src, old, new, 1))
}

// TurnIDNotNull is the edit that looks harmless — "every row gets a turn":
// turn_id NOT NULL with a default — and that every writer which stores NULL
// for a frame without a turn id (AC-2a) cannot write.
func TurnIDNotNull(t testing.TB) []byte {
	return EditedSchema(t, "column \"turn_id\" {\n    type = local.text\n    null = true\n  }",
		"column \"turn_id\" {\n    type    = local.text\n    null    = false\n    default = \"\"\n  }")
}
