package render_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/tool/bench/render"
)

// A rate table's ratio is the rate's, ours over the floor's, as its target
// is: ours at 2894 frames/s beside a floor at 3237/s is 0.89×, under a
// "rate ≥ 0.90×" target; a time table's ratio is the time's.
func TestTables_EveryRatioPointsTheWayOfItsTarget(t *testing.T) {
	notMet, met := false, true
	frames := 2894
	rep := &render.Report{Dialect: dialect.Postgres, Started: time.Unix(0, 0), Measurements: []render.Measurement{
		{Name: render.Capture, Family: render.FamilyRows, N: 1000, Count: frames,
			Ours: time.Second, Floor: time.Second * 2894 / 3237,
			Ratio: 3237.0 / 2894, Target: 1 / 0.90, Met: &notMet, OursIs: "ours", FloorIs: "floor"},
		{Name: render.SteadyState, Family: render.FamilyRows, N: 1000,
			Ours: 3 * time.Millisecond, Floor: 2 * time.Millisecond, Ratio: 1.5, Target: 2, Met: &met, OursIs: "ours", FloorIs: "floor"},
	}}
	out := string(render.Tables(rep, ""))
	require.Contains(t, out, "| rows | ours | floor | rate: ours / floor | target |")
	require.Contains(t, out, "| 2894/s | 3237/s | 0.89× | rate ≥ 0.90×: not met |")
	require.Contains(t, out, "| rows | ours | floor | time: ours / floor | target |")
	require.Contains(t, out, "| 1.50× | ≤ 2.00×: met |")
}
