package render

import (
	"fmt"
	"time"
)

// NamedChart is a chart and the file name it is written under.
type NamedChart struct {
	File  string
	Chart Chart
}

var titles = map[string]string{
	Rebuild:           "SQLite rebuild of task_session_subagents",
	ConstraintSwap:    "PostgreSQL constraint swap of task_session_subagents",
	SteadyState:       "steady-state boot",
	Backfill:          "backfill",
	Capture:           "live capture rate",
	CaptureConcurrent: "live capture rate, 8 concurrent writers",
	Health:            "health evaluation",

	PoolerBoot:              "boot from the legacy state, through PgBouncer (transaction mode) vs direct",
	PoolerSteady:            "steady-state boot, through PgBouncer (transaction mode) vs direct",
	PoolerCapture:           "live capture rate, through PgBouncer (transaction mode) vs direct",
	PoolerCaptureConcurrent: "live capture rate, 8 concurrent writers, through PgBouncer (transaction mode) vs direct",
}

// Charts builds one chart per measurement and family, and one of memory per family.
func Charts(rep *Report) []NamedChart {
	var out []NamedChart
	xlabel := map[string]string{FamilyRows: "task_session_subagents rows", FamilyMessages: "task_session_messages rows"}
	for _, g := range groups(rep) {
		name, family := g[0], g[1]
		pts := rep.points(name, family)
		c := Chart{Title: fmt.Sprintf("%s, by %s (%s)", titles[name], family, rep.Dialect), XLabel: xlabel[family],
			YLabel: "median time", LogY: true, FormatX: FormatCount, FormatY: FormatSeconds}
		y := func(d time.Duration, _ *Measurement) float64 { return d.Seconds() }
		if isRate(name) {
			c.YLabel, c.LogY, c.FormatY = "frames or rows per second", false, func(v float64) string { return trimZero(v) + "/s" }
			y = func(d time.Duration, m *Measurement) float64 {
				if d <= 0 {
					return 0
				}
				return float64(m.Count) / d.Seconds()
			}
		}
		series := func(label string, get func(*Measurement) time.Duration, dashed bool) {
			s := Series{Name: label, Dashed: dashed}
			for _, m := range pts {
				s.Points = append(s.Points, Point{X: float64(m.N), Y: y(get(m), m)})
			}
			c.Series = append(c.Series, s)
		}
		series("ours (in process)", func(m *Measurement) time.Duration { return m.Ours }, false)
		series("floor", func(m *Measurement) time.Duration { return m.Floor }, false)
		for _, a := range firstAnchors(pts) {
			an := a.Name
			series(an, func(m *Measurement) time.Duration {
				if a := m.Anchor(an); a != nil && a.Err == "" {
					return a.Median
				}
				return 0
			}, an == AnchorPhysical)
		}
		out = append(out, NamedChart{File: name + "-" + family + ".svg", Chart: c})
	}
	for _, family := range []string{FamilyRows, FamilyMessages} {
		var heap, rss Series
		heap.Name, rss.Name = "Go heap, peak", "process RSS, peak"
		for _, m := range rep.Memory {
			if m.Family == family {
				heap.Points = append(heap.Points, Point{X: float64(m.N), Y: float64(m.HeapPeak)})
				rss.Points = append(rss.Points, Point{X: float64(m.N), Y: float64(m.RSSPeak)})
			}
		}
		if len(heap.Points) == 0 {
			continue
		}
		out = append(out, NamedChart{File: "memory-" + family + ".svg", Chart: Chart{
			Title:  fmt.Sprintf("memory of the first timed reconcile (%s, %s family)", rep.Dialect, family),
			XLabel: xlabel[family], YLabel: "bytes", FormatX: FormatCount, FormatY: FormatBytes, Series: []Series{heap, rss}}})
	}
	return out
}
