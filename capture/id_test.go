package capture_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/internal/dbtest"
)

// A row Record creates gets a random version 4 UUID as its id, a new one per
// row.
func TestRecord_RowIDIsARandomUUID(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		s := newStore(t, db)
		s.record(t, frame("toolu_1", at(0)), frame("toolu_2", at(1)))
		ids := s.Strings(t, `SELECT id FROM task_session_subagents ORDER BY tool_call_id`)
		require.Len(t, ids, 2)
		for _, id := range ids {
			require.Regexp(t, `^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`, id)
		}
		require.NotEqual(t, ids[0], ids[1])
	})
}
