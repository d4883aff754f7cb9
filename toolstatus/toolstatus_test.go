package toolstatus_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/toolstatus"
)

// AC-11: the terminal set is exactly the spec's six statuses, compared verbatim.
func TestTerminal_AC11_PinsSpecList(t *testing.T) {
	spec := []string{"complete", "completed", "success", "error", "failed", "cancelled"}
	require.ElementsMatch(t, spec, toolstatus.Terminal)
	for _, s := range spec {
		require.True(t, toolstatus.IsTerminal(s), s)
	}
	for _, s := range []string{"", "in_progress", "pending", "async_launched", "started", "Completed", "completed ", "canceled", "cancelled_by_user", "done"} {
		require.False(t, toolstatus.IsTerminal(s), s)
	}
	require.Equal(t, "'complete', 'completed', 'success', 'error', 'failed', 'cancelled'", toolstatus.SQLList())
}
