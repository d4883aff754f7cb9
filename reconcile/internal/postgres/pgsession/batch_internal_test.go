package pgsession

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A batched phase sizes its batches so that each holds its row locks for
// about batchTarget: fewer pages after a slow batch, more after a quick one,
// never more than the WithCopyBatchPages ceiling nor fewer than
// minBatchPages (unless the ceiling is lower).
func TestNextBatch_HoldsEachBatchNearTheTarget(t *testing.T) {
	for _, c := range []struct {
		batch, most int64
		took        time.Duration
		want        int64
	}{
		{256, 256, 4 * batchTarget, 64},
		{256, 256, 1000 * batchTarget, minBatchPages},
		{64, 256, batchTarget / 4, 128},
		{200, 256, batchTarget / 4, 256},
		{100, 256, batchTarget * 3 / 2, 100},
		{1, 1, batchTarget / 10, 1},
		{1, 1, 10 * batchTarget, 1},
	} {
		require.Equal(t, c.want, nextBatch(c.batch, c.most, c.took), "%+v", c)
	}
}
