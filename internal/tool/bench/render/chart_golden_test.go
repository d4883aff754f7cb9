package render_test

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/internal/tool/bench/render"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/chart.svg from the current renderer")

// The chart renderer's output, byte for byte, for both y scales: a
// refactoring of the renderer that changes a picture fails here.
func TestChart_SVGIsStable(t *testing.T) {
	for _, logY := range []bool{false, true} {
		c := render.Chart{Title: "a <title>", XLabel: "rows", YLabel: "seconds", LogY: logY,
			FormatX: func(v float64) string { return fmt.Sprintf("%.0f", v) },
			Series: []render.Series{
				{Name: "ours, a name long enough to be wrapped in the legend", Points: []render.Point{{X: 1e3, Y: 0.5}, {X: 1e5, Y: 3}, {X: 1e6, Y: 20}}},
				{Name: "floor", Dashed: true, Points: []render.Point{{X: 1e3, Y: 0.4}, {X: 1e5, Y: 0}, {X: 1e6, Y: 15}}},
			}}
		path := filepath.Join("testdata", fmt.Sprintf("chart-logy-%v.svg", logY))
		got := c.SVG()
		if *updateGolden {
			require.NoError(t, os.WriteFile(path, got, 0o644))
		}
		want, err := os.ReadFile(path)
		require.NoError(t, err)
		require.Equal(t, string(want), string(got))
	}
	require.Contains(t, string(render.Chart{Title: "empty"}.SVG()), "no data")
}
