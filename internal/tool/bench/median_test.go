package bench

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestMedian_OddEvenAndUnsortedRuns(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		runs []time.Duration
		want time.Duration
	}{
		{nil, 0},
		{[]time.Duration{5 * ms}, 5 * ms},
		{[]time.Duration{9 * ms, 1 * ms, 4 * ms}, 4 * ms},
		{[]time.Duration{8 * ms, 2 * ms, 4 * ms, 6 * ms}, 5 * ms},
	} {
		in := append([]time.Duration(nil), tc.runs...)
		require.Equal(t, tc.want, median(tc.runs))
		require.Equal(t, in, tc.runs, "median does not reorder the recorded runs")
	}
}
