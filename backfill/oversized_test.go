package backfill_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/backfill"
	"github.com/schemastate/schemastate/internal/instant"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
)

// A candidate whose metadata is longer than the limit is not parsed: it
// yields no row, is counted and named, and does not move backfill_through,
// whatever its document would have given; every other message is read as
// before. A long message that could never qualify is not counted.
func TestBackfill_OversizedMetadataIsCountedNotParsed(t *testing.T) {
	const limit = 512
	long := strings.Repeat("y", limit)
	eachDeclared(t, func(t *testing.T, db *dbtest.DB) {
		seed(t, db,
			message{ID: "m-ok", Session: "s1", Task: "task-1", Turn: "t", Created: base,
				Meta: subagent("tc-ok", map[string]any{"status": "completed"}, map[string]any{"model": "ok"})},
			// Newer than m-ok, and a well-formed subagent_task: read, it
			// would be a row and backfill_through.
			message{ID: "m-big2", Session: "s1", Task: "task-1", Turn: "t", Created: base.Add(2 * time.Hour),
				Meta: subagent("tc-big2", nil, map[string]any{"description": long})},
			message{ID: "m-big1", Session: "s1", Task: "task-1", Turn: "t", Created: base.Add(time.Hour),
				Meta: subagent("tc-ok", nil, map[string]any{"model": "big", "result": long})},
			// Exactly the limit is parsed.
			message{ID: "m-edge", Session: "s1", Task: "task-1", Turn: "t", Created: base,
				Meta: padded(t, subagent("tc-edge", nil, map[string]any{"model": "edge"}), limit)},
			message{ID: "m-plain", Session: "s1", Task: "task-1", Turn: "t", Created: base.Add(3 * time.Hour),
				Meta: `{"type":"message","text":"` + long + `"}`},
		)
		res, err := run(t, db, backfill.WithMaxMetadata(limit))
		require.NoError(t, err)
		require.EqualValues(t, 2, res.Inserted)
		require.EqualValues(t, 2, res.OversizedMetadata)
		require.Equal(t, "m-big1", res.FirstOversized)
		require.Zero(t, res.UnreadableCreatedAt)
		require.Equal(t, instant.Format(base), res.BackfillThrough)
		got := rows(t, db)
		require.ElementsMatch(t, []string{"tc-edge/unknown", "tc-ok/unknown"}, mapKeys(got))
		require.Equal(t, "ok", got["tc-ok/unknown"].get("model"))
		require.Equal(t, "edge", got["tc-edge/unknown"].get("model"))
	})
}

// padded is the JSON object doc with a member added so that it is exactly n bytes long.
func padded(t *testing.T, doc string, n int) string {
	t.Helper()
	pad := n - len(doc) - len(`,"pad":""`)
	require.Positive(t, pad)
	return doc[:len(doc)-1] + `,"pad":"` + strings.Repeat("p", pad) + `"}`
}
