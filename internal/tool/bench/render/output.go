package render

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// WriteFiles writes a run's results into dir: report.json (everything),
// results.csv (one line per point and series), one SVG chart per
// measurement and family, and tables.md (the Markdown tables the doc
// quotes). File names start with the dialect, so both dialects' runs can
// share one directory. Charts are linked from tables.md as imagePrefix +
// file name: the path from the Markdown that quotes the tables to dir. It
// returns the paths written.
func WriteFiles(dir, imagePrefix string, rep *Report) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var written []string
	put := func(name string, b []byte) error {
		p := filepath.Join(dir, string(rep.Dialect)+"-"+name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			return err
		}
		written = append(written, p)
		return nil
	}
	js, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := put("report.json", append(js, '\n')); err != nil {
		return nil, err
	}
	if err := put("results.csv", CSV(rep)); err != nil {
		return nil, err
	}
	for _, c := range Charts(rep) {
		if err := put(c.File, c.Chart.SVG()); err != nil {
			return nil, err
		}
	}
	if err := put("tables.md", Tables(rep, imagePrefix)); err != nil {
		return nil, err
	}
	if err := put("summary.md", Summary(rep)); err != nil {
		return nil, err
	}
	return written, nil
}

// Summary renders one table of every measured point of a report: ours, the
// floor, their ratio in the direction of the target (time over time, or a
// rate over a rate for live capture) and the target with whether it was
// met. docs/benchmarks.md holds it as written.
func Summary(rep *Report) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "| measurement (%s) | size | ours | floor | ours / floor | target |\n|---|---:|---:|---:|---:|---|\n", rep.Dialect)
	for _, g := range groups(rep) {
		name, family := g[0], g[1]
		kind, ratio := against(name)
		for _, m := range rep.points(name, family) {
			fmt.Fprintf(&b, "| %s | %s %s | %s | %s | %.2f× (%s) | %s |\n", titles[name], FormatCount(float64(m.N)), family,
				cell(m, m.Ours), cell(m, m.Floor), ratio(m.Ours, m.Floor), kind, target(name, m))
		}
	}
	return b.Bytes()
}

// CSV renders one line per measured point and series (ours, floor, each
// anchor, each fixed cost): dialect, measurement, family, n, rows, messages,
// series, median_ns, runs_ns (space-separated), ratio to the floor.
func CSV(rep *Report) []byte {
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	w.Write([]string{"dialect", "measurement", "family", "n", "rows", "messages", "series", "median_ns", "runs_ns", "ratio_to_floor"}) //nolint:errcheck
	line := func(m *Measurement, series string, med time.Duration, runs []time.Duration) {
		ratio := ""
		if m.Floor > 0 && med > 0 {
			ratio = strconv.FormatFloat(float64(med)/float64(m.Floor), 'f', 4, 64)
		}
		var rs []string
		for _, r := range runs {
			rs = append(rs, strconv.FormatInt(int64(r), 10))
		}
		w.Write([]string{string(rep.Dialect), m.Name, m.Family, strconv.Itoa(m.N), strconv.Itoa(m.Rows), strconv.Itoa(m.Messages), //nolint:errcheck
			series, strconv.FormatInt(int64(med), 10), strings.Join(rs, " "), ratio})
	}
	for i := range rep.Measurements {
		m := &rep.Measurements[i]
		line(m, "ours", m.Ours, m.OursRuns)
		line(m, "floor", m.Floor, m.FloorRuns)
		for _, a := range m.Anchors {
			if a.Err == "" {
				line(m, a.Name, a.Median, a.Runs)
			}
		}
		for _, c := range m.Fixed {
			line(m, "fixed: "+c.Name, c.Median, nil)
		}
	}
	w.Flush()
	return b.Bytes()
}

// groups lists the (measurement, family) pairs of a report in first-seen order.
func groups(rep *Report) [][2]string {
	var out [][2]string
	seen := map[[2]string]bool{}
	for _, m := range rep.Measurements {
		k := [2]string{m.Name, m.Family}
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}

// firstAnchors is each anchor of pts once, as it first appears, in the
// order it first appears.
func firstAnchors(pts []*Measurement) []Anchor {
	var out []Anchor
	seen := map[string]bool{}
	for _, m := range pts {
		for _, a := range m.Anchors {
			if !seen[a.Name] {
				seen[a.Name] = true
				out = append(out, a)
			}
		}
	}
	return out
}

func (rep *Report) points(name, family string) []*Measurement {
	var out []*Measurement
	for i := range rep.Measurements {
		if m := &rep.Measurements[i]; m.Name == name && m.Family == family {
			out = append(out, m)
		}
	}
	return out
}

// Tables renders the Markdown tables of a run: one per measurement and
// family (every size, ours, the floor, the ratio, every anchor), the fixed
// costs, memory, and the PostgreSQL lock windows.
func Tables(rep *Report, imagePrefix string) []byte {
	var b bytes.Buffer
	for _, g := range groups(rep) {
		name, family := g[0], g[1]
		pts := rep.points(name, family)
		anchors := writeHeading(&b, rep, name, family, pts, imagePrefix)
		writeResults(&b, name, family, pts, anchors)
		writeFixed(&b, family, pts)
		writeWhere(&b, pts)
	}
	writeMemory(&b, rep, imagePrefix)
	writeLocks(&b, rep)
	writeRun(&b, rep)
	return b.Bytes()
}

// writeHeading writes a curve's title, chart, what each side and anchor runs,
// and returns the anchors' names in the order the table shows them.
func writeHeading(b *bytes.Buffer, rep *Report, name, family string, pts []*Measurement, imagePrefix string) []string {
	fmt.Fprintf(b, "#### %s — %s, by %s\n\n", titles[name], rep.Dialect, family)
	fmt.Fprintf(b, "![%s, by %s (%s)](%s%s-%s-%s.svg)\n\n", titles[name], family, rep.Dialect, imagePrefix, rep.Dialect, name, family)
	fmt.Fprintf(b, "Ours: %s.  \nFloor: %s.\n", pts[0].OursIs, pts[0].FloorIs)
	var anchors []string
	for _, a := range firstAnchors(pts) {
		anchors = append(anchors, a.Name)
		is := a.Is
		if a.Name == AnchorPhysical {
			is = "the rebuilt table and its indexes written once at the disk's sequential write rate, measured right before the size's runs (both per size below)"
		}
		fmt.Fprintf(b, "Anchor *%s*: %s.\n", a.Name, is)
	}
	return anchors
}

// against is how a table compares a side with the floor, and says so in its
// column heading: time over the floor's time, or for a rate (live capture)
// the side's rate over the floor's rate, so that every ratio points the same
// way as its target (≤ for a time, ≥ for a rate).
func against(name string) (kind string, ratio func(side, floor time.Duration) float64) {
	if isRate(name) {
		return "rate", func(side, floor time.Duration) float64 { return float64(floor) / float64(max(side, 1)) }
	}
	return "time", func(side, floor time.Duration) float64 { return float64(side) / float64(max(floor, 1)) }
}

// writeResults writes a curve's table, a row per size, and the anchors that
// failed.
func writeResults(b *bytes.Buffer, name, family string, pts []*Measurement, anchors []string) {
	kind, ratio := against(name)
	heading := kind + ": ours / floor"
	b.WriteString("\n| " + family + " | ours | floor | " + heading + " | target |")
	for _, a := range anchors {
		b.WriteString(" " + a + " (" + heading + ") |")
	}
	b.WriteString("\n|---:|---:|---:|---:|---|" + strings.Repeat("---:|", len(anchors)) + "\n")
	for _, m := range pts {
		fmt.Fprintf(b, "| %s | %s | %s | %.2f× | %s |", FormatCount(float64(m.N)), cell(m, m.Ours), cell(m, m.Floor), ratio(m.Ours, m.Floor), target(name, m))
		for _, an := range anchors {
			a := m.Anchor(an)
			switch {
			case a == nil:
				b.WriteString(" — |")
			case a.Err != "":
				b.WriteString(" fails (see below) |")
			default:
				fmt.Fprintf(b, " %s (%.2f×) |", cell(m, a.Median), ratio(a.Median, m.Floor))
			}
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
	for _, m := range pts {
		for _, a := range m.Anchors {
			if a.Err != "" {
				fmt.Fprintf(b, "- at %s: *%s* failed: `%s`\n", FormatCount(float64(m.N)), a.Name, OneLine(a.Err, 300))
			}
		}
	}
}

// target is a size's target and whether it was met, in the direction of the
// table's ratio.
func target(name string, m *Measurement) string {
	if m.Target <= 0 {
		return "—"
	}
	met := "not met"
	if m.Met != nil && *m.Met {
		met = "met"
	}
	if isRate(name) {
		return fmt.Sprintf("rate ≥ %.2f×: %s", 1/m.Target, met)
	}
	return fmt.Sprintf("≤ %.2f×: %s", m.Target, met)
}

// writeFixed writes the fixed costs inside ours, each timed alone.
func writeFixed(b *bytes.Buffer, family string, pts []*Measurement) {
	if len(pts[0].Fixed) == 0 {
		return
	}
	fmt.Fprintf(b, "\nFixed costs inside ours, each timed alone (median of 3):\n\n| %s |", family)
	for _, c := range pts[0].Fixed {
		b.WriteString(" " + c.Name + " |")
	}
	b.WriteString("\n|---:|" + strings.Repeat("---:|", len(pts[0].Fixed)) + "\n")
	for _, m := range pts {
		fmt.Fprintf(b, "| %s |", FormatCount(float64(m.N)))
		for _, c := range m.Fixed {
			fmt.Fprintf(b, " %s |", Dur(c.Median))
		}
		b.WriteString("\n")
	}
}

// writeWhere writes where the time goes, per size.
func writeWhere(b *bytes.Buffer, pts []*Measurement) {
	b.WriteString("\nWhere the time goes, per size:\n\n")
	for _, m := range pts {
		extra := ""
		if m.Bytes > 0 {
			extra = fmt.Sprintf(" Table and indexes written: %.1f MiB, %.1f MiB/s by ours, %.1f MiB/s by the floor.", float64(m.Bytes)/(1<<20),
				float64(m.Bytes)/(1<<20)/m.Ours.Seconds(), float64(m.Bytes)/(1<<20)/m.Floor.Seconds())
		}
		if a := m.Anchor(AnchorPhysical); a != nil {
			extra += " Physical limit: " + a.Is + "."
		}
		fmt.Fprintf(b, "- %s: %s.%s\n", FormatCount(float64(m.N)), m.Detail, extra)
	}
	b.WriteString("\n")
}

// writeMemory writes the memory charts and table.
func writeMemory(b *bytes.Buffer, rep *Report, imagePrefix string) {
	if len(rep.Memory) == 0 {
		return
	}
	fmt.Fprintf(b, "#### memory — %s\n\n", rep.Dialect)
	for _, f := range []string{FamilyRows, FamilyMessages} {
		for _, m := range rep.Memory {
			if m.Family == f {
				fmt.Fprintf(b, "![memory, %s family (%s)](%s%s-memory-%s.svg)\n", f, rep.Dialect, imagePrefix, rep.Dialect, f)
				break
			}
		}
	}
	fmt.Fprintf(b, "\n| family | size | operation | Go heap peak | RSS before | RSS peak |\n|---|---:|---|---:|---:|---:|\n")
	for _, m := range rep.Memory {
		fmt.Fprintf(b, "| %s | %s | %s | %.1f MiB | %.1f MiB | %.1f MiB |\n", m.Family, FormatCount(float64(m.N)), m.Operation,
			float64(m.HeapPeak)/(1<<20), float64(m.RSSBefore)/(1<<20), float64(m.RSSPeak)/(1<<20))
	}
	b.WriteString("\n")
}

// writeLocks writes the PostgreSQL swap as seen from outside.
func writeLocks(b *bytes.Buffer, rep *Report) {
	if len(rep.Locks) == 0 {
		return
	}
	b.WriteString("#### PostgreSQL: the swap seen from outside (one extra untimed reconcile per size)\n\n" +
		"ACCESS EXCLUSIVE sighted: from the first to the last poll of `pg_locks` that saw one granted on the table, plus a poll interval — " +
		"a span over every exclusive lock of the swap and the old table's drop, not one hold; what a host feels is the reader's worst statement.\n\n" +
		"| rows | ACCESS EXCLUSIVE sighted | reader worst | reader worst, nothing running | poll interval |\n|---:|---:|---:|---:|---:|\n")
	for _, l := range rep.Locks {
		if l.Err != "" {
			fmt.Fprintf(b, "| %s | failed: `%s` | %s | — | %s |\n", FormatCount(float64(l.Rows)), l.Err, Dur(l.ReaderWorst), Dur(l.PollInterval))
			continue
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s |\n", FormatCount(float64(l.Rows)), Dur(l.Held), Dur(l.ReaderWorst), Dur(l.ReaderBaseline), Dur(l.PollInterval))
	}
	b.WriteString("\n")
}

// writeRun writes what the run measured on.
func writeRun(b *bytes.Buffer, rep *Report) {
	b.WriteString("#### the run\n\n")
	for _, s := range rep.Stores {
		fmt.Fprintf(b, "- store (%s family): %.0f MiB requested, %.1f MiB written, %d messages, %d subagent messages, generated in %s\n",
			s.Family, s.ScaleMB, float64(s.Bytes)/(1<<20), s.Messages, s.Subagents, Dur(s.Generate))
	}
	for _, d := range rep.Disk {
		fmt.Fprintf(b, "- disk sequential write (%d MiB, fsync, in %s): %.0f MiB/s\n", d.Bytes>>20, d.Path, d.BytesPerSec/(1<<20))
	}
	fmt.Fprintf(b, "- %s, %d CPUs, %d runs per point (%d at a million and above), %d frames per capture run, started %s\n",
		rep.GoVersion, rep.CPUs, rep.Runs, rep.LargeRuns, rep.Frames, rep.Started.Format(time.RFC3339))
	for _, s := range rep.Skipped {
		fmt.Fprintf(b, "- not measured: %s\n", s)
	}
}

// isRate says whether a measurement is reported as a rate (Count per run).
func isRate(name string) bool {
	return name == Capture || name == CaptureConcurrent || name == PoolerCapture || name == PoolerCaptureConcurrent
}

func cell(m *Measurement, d time.Duration) string {
	if isRate(m.Name) && d > 0 {
		return fmt.Sprintf("%.0f/s", float64(m.Count)/d.Seconds())
	}
	return Dur(d)
}

// Dur formats a duration with a precision that fits its size.
func Dur(d time.Duration) string {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond).String()
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond).String()
	}
	return d.Round(time.Microsecond).String()
}

// OneLine is s on one line, its runs of white space made one space, cut at n
// bytes with an ellipsis.
func OneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		s = s[:n] + "…"
	}
	return s
}
