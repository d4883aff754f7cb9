package render

import (
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestChart_LogScaleXPlacesDecadesEvenly(t *testing.T) {
	c := Chart{Title: "t", XLabel: "rows", YLabel: "time", LogY: true, FormatX: FormatCount, FormatY: FormatSeconds,
		Series: []Series{{Name: "ours", Points: []Point{{1e3, 0.001}, {1e4, 0.01}, {1e5, 0.1}, {1e6, 1}}}}}
	svg := string(c.SVG())
	re := regexp.MustCompile(`<circle cx="([0-9.]+)" cy="([0-9.]+)"`)
	ms := re.FindAllStringSubmatch(svg, -1)
	require.Len(t, ms, 4)
	var xs, ys []float64
	for _, m := range ms {
		x, _ := strconv.ParseFloat(m[1], 64)
		y, _ := strconv.ParseFloat(m[2], 64)
		xs, ys = append(xs, x), append(ys, y)
	}
	// One decade is the same width everywhere on x, and on a log y a
	// straight power law is a straight line.
	for i := 1; i < 3; i++ {
		require.InDelta(t, xs[1]-xs[0], xs[i+1]-xs[i], 0.2)
		require.InDelta(t, ys[1]-ys[0], ys[i+1]-ys[i], 0.2)
	}
	require.Less(t, ys[3], ys[0], "larger values are drawn higher")
	for _, label := range []string{">1k<", ">1M<", ">1 ms<", ">1 s<", "ours"} {
		require.Contains(t, svg, label)
	}
}

func TestChart_SkipsPointsWithoutAValue(t *testing.T) {
	c := Chart{Series: []Series{{Name: "anchor", Points: []Point{{1e3, 0}, {1e4, 2}}}, {Name: "floor", Points: []Point{{1e3, 1}, {1e4, 1}}}}}
	svg := string(c.SVG())
	require.Len(t, regexp.MustCompile(`<circle`).FindAllString(svg, -1), 3, "a failed anchor's point is not drawn at zero")
}

func TestFormatCount(t *testing.T) {
	for v, want := range map[float64]string{300: "300", 1000: "1k", 300000: "300k", 1e6: "1M", 4e6: "4M", 2.5e6: "2.5M"} {
		require.Equal(t, want, FormatCount(v))
	}
}
