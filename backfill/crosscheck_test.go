package backfill_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/internal/dbtest"
)

// AC-23b: one message whose metadata is nested deeper than the JSON parser's
// stack allows is not a subagent document and must not abort the backfill —
// which would fail it on every boot and never publish capture_since
// (AC-24a). SQLite's json_valid rejects it; PostgreSQL's cast raises
// "stack depth limit exceeded" (54001), not a data_exception.
func TestCrosscheck_AC23b_DeeplyNestedMetadataIsSkipped(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		declared(t, db)
		deep := `{"tool_call_id":"tc-deep","d":` + strings.Repeat("[", 100000) + strings.Repeat("]", 100000) +
			`,"normalized":{"kind":"subagent_task","subagent_task":{}}}`
		seed(t, db,
			message{ID: "m1", Session: "s1", Task: "task-s1", Turn: "turn-1", Created: base, Meta: deep},
			message{ID: "m2", Session: "s1", Task: "task-s1", Turn: "turn-1", Created: base, Meta: subagent("tc-ok", nil, nil)},
		)
		res := mustRun(t, db)
		require.EqualValues(t, 1, res.Inserted)
		got := rows(t, db)
		require.Len(t, got, 1)
		require.Contains(t, got, "tc-ok/unknown")
		require.NotNil(t, keySet(t, db).CaptureSince)
	})
}
