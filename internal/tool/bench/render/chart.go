package render

import (
	"bytes"
	"fmt"
	"html"
	"math"
	"sort"
)

// A small SVG line-chart writer: log-scale x (store sizes span three
// decades), log- or linear-scale y, one polyline with point markers per
// series, a legend. The output is plain SVG 1.1 that GitHub and any browser
// render inline from Markdown; no plotting library is needed for that, and
// none of the Go ones would render these few lines with less code than this.

// Series is one line of a chart.
type Series struct {
	Name   string
	Points []Point
	Dashed bool
}

// Point is one (x, y) of a series; y ≤ 0 is not drawn.
type Point struct{ X, Y float64 }

// Chart is one picture.
type Chart struct {
	Title, XLabel, YLabel string
	// LogY uses a log scale on y too.
	LogY   bool
	Series []Series
	// FormatX and FormatY label the ticks.
	FormatX, FormatY func(float64) string
}

var palette = []string{"#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#d62728", "#7f7f7f", "#8c564b", "#e377c2"}

const (
	chartW, chartH                 = 860, 440
	padL, padR, padT, padB, legend = 78, 16, 36, 52, 230
)

// SVG renders the chart.
func (c Chart) SVG() []byte {
	xs, ymin, ymax := c.extent()
	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", chartW, chartH, chartW, chartH)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", chartW, chartH)
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="15" font-weight="bold">%s</text>`+"\n", padL, html.EscapeString(c.Title))
	if len(xs) == 0 {
		b.WriteString(`<text x="100" y="200">no data</text></svg>` + "\n")
		return b.Bytes()
	}
	p := c.plot(xs, ymin, ymax)
	p.axes(&b, c, xs)
	for i, s := range c.Series {
		p.series(&b, i, s)
	}
	b.WriteString("</svg>\n")
	return b.Bytes()
}

// extent is the x values of the drawable points, sorted, and their y range.
func (c Chart) extent() (xs []float64, ymin, ymax float64) {
	ymin, ymax = math.Inf(1), math.Inf(-1)
	seen := map[float64]bool{}
	for _, s := range c.Series {
		for _, p := range s.Points {
			if p.X <= 0 || p.Y <= 0 || math.IsInf(p.Y, 0) || math.IsNaN(p.Y) {
				continue
			}
			if !seen[p.X] {
				seen[p.X] = true
				xs = append(xs, p.X)
			}
			ymin, ymax = math.Min(ymin, p.Y), math.Max(ymax, p.Y)
		}
	}
	sort.Float64s(xs)
	return xs, ymin, ymax
}

// plotArea maps data to the plot's pixels and labels its ticks.
type plotArea struct {
	w, h     float64
	lx0, lx1 float64
	y0, y1   float64
	logY     bool
	fx, fy   func(float64) string
	yticks   []float64
}

func (c Chart) plot(xs []float64, ymin, ymax float64) *plotArea {
	p := &plotArea{w: float64(chartW - padL - padR - legend), h: float64(chartH - padT - padB), logY: c.LogY, fx: c.FormatX, fy: c.FormatY}
	p.lx0, p.lx1 = math.Log10(xs[0]), math.Log10(xs[len(xs)-1])
	if p.lx1-p.lx0 < 1e-9 {
		p.lx0, p.lx1 = p.lx0-0.5, p.lx1+0.5
	}
	if c.LogY {
		p.y0, p.y1 = math.Floor(math.Log10(ymin)), math.Ceil(math.Log10(ymax))
		if p.y1-p.y0 < 1 {
			p.y1 = p.y0 + 1
		}
		for e := p.y0; e <= p.y1; e++ {
			for _, m := range []float64{1, 2, 5} {
				if v := m * math.Pow(10, e); math.Log10(v) <= p.y1+1e-9 {
					p.yticks = append(p.yticks, v)
				}
			}
		}
	} else {
		p.y0, p.y1 = 0, niceCeil(ymax*1.1)
		for i := 0; i <= 5; i++ {
			p.yticks = append(p.yticks, p.y1*float64(i)/5)
		}
	}
	if p.fx == nil {
		p.fx = func(v float64) string { return fmt.Sprint(v) }
	}
	if p.fy == nil {
		p.fy = func(v float64) string { return fmt.Sprintf("%g", v) }
	}
	return p
}

func (p *plotArea) px(x float64) float64 {
	return float64(padL) + (math.Log10(x)-p.lx0)/(p.lx1-p.lx0)*p.w
}

func (p *plotArea) py(y float64) float64 {
	v := y
	if p.logY {
		v = math.Log10(y)
	}
	return float64(padT) + p.h - (v-p.y0)/(p.y1-p.y0)*p.h
}

// axes draws the grid, the frame, the tick labels and the axis labels.
func (p *plotArea) axes(b *bytes.Buffer, c Chart, xs []float64) {
	fmt.Fprintf(b, `<g stroke="#ccc" stroke-width="1">`+"\n")
	for _, v := range p.yticks {
		fmt.Fprintf(b, `<line x1="%d" x2="%.1f" y1="%.1f" y2="%.1f"/>`+"\n", padL, float64(padL)+p.w, p.py(v), p.py(v))
	}
	for _, x := range xs {
		fmt.Fprintf(b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%.1f"/>`+"\n", p.px(x), p.px(x), padT, float64(padT)+p.h)
	}
	b.WriteString("</g>\n")
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="%.1f" height="%.1f" fill="none" stroke="#333"/>`+"\n", padL, padT, p.w, p.h)
	for _, v := range p.yticks {
		fmt.Fprintf(b, `<text x="%d" y="%.1f" text-anchor="end" dominant-baseline="middle">%s</text>`+"\n", padL-6, p.py(v), html.EscapeString(p.fy(v)))
	}
	for _, x := range xs {
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", p.px(x), float64(padT)+p.h+16, html.EscapeString(p.fx(x)))
	}
	fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", float64(padL)+p.w/2, chartH-10, html.EscapeString(c.XLabel+" (log scale)"))
	yl := c.YLabel
	if c.LogY {
		yl += " (log scale)"
	}
	fmt.Fprintf(b, `<text transform="translate(16 %.1f) rotate(-90)" text-anchor="middle">%s</text>`+"\n", float64(padT)+p.h/2, html.EscapeString(yl))
}

// series draws series i: its line, its points with their values, and its
// legend entry.
func (p *plotArea) series(b *bytes.Buffer, i int, s Series) {
	color := palette[i%len(palette)]
	dash := ""
	if s.Dashed {
		dash = ` stroke-dasharray="6 4"`
	}
	var pts bytes.Buffer
	for _, pt := range s.Points {
		if pt.X > 0 && pt.Y > 0 {
			fmt.Fprintf(&pts, "%.1f,%.1f ", p.px(pt.X), p.py(pt.Y))
		}
	}
	fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="2"%s points="%s"/>`+"\n", color, dash, bytes.TrimSpace(pts.Bytes()))
	for _, pt := range s.Points {
		if pt.X > 0 && pt.Y > 0 {
			fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"><title>%s: %s at %s</title></circle>`+"\n", p.px(pt.X), p.py(pt.Y), color, html.EscapeString(s.Name), html.EscapeString(p.fy(pt.Y)), html.EscapeString(p.fx(pt.X)))
		}
	}
	ly := padT + 8 + i*34
	lx := chartW - legend - padR + 20
	fmt.Fprintf(b, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="2"%s/>`+"\n", lx, lx+22, ly, ly, color, dash)
	for j, line := range wrap(s.Name, 28) {
		fmt.Fprintf(b, `<text x="%d" y="%d" dominant-baseline="middle">%s</text>`+"\n", lx+28, ly+j*13, html.EscapeString(line))
	}
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	e := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*e >= v {
			return m * e
		}
	}
	return 10 * e
}

// wrap splits s into lines of at most n characters at spaces (two lines at
// most; the rest is cut with an ellipsis).
func wrap(s string, n int) []string {
	var lines []string
	for len(s) > n && len(lines) < 1 {
		cut := n
		for cut > 0 && s[cut] != ' ' {
			cut--
		}
		if cut == 0 {
			cut = n
		}
		lines = append(lines, s[:cut])
		s = s[min(cut+1, len(s)):]
	}
	if len(s) > n+4 {
		s = s[:n+1] + "…"
	}
	return append(lines, s)
}

// FormatCount labels a size: 1k, 300k, 1M, 4M.
func FormatCount(v float64) string {
	switch {
	case v >= 1e6:
		return trimZero(v/1e6) + "M"
	case v >= 1e3:
		return trimZero(v/1e3) + "k"
	}
	return trimZero(v)
}

// FormatSeconds labels a duration given in seconds.
func FormatSeconds(v float64) string {
	switch {
	case v >= 1:
		return trimZero(v) + " s"
	case v >= 1e-3:
		return trimZero(v*1e3) + " ms"
	}
	return trimZero(v*1e6) + " µs"
}

// FormatBytes labels a size in bytes as MiB.
func FormatBytes(v float64) string { return trimZero(v/(1<<20)) + " MiB" }

func trimZero(v float64) string {
	s := fmt.Sprintf("%.2f", v)
	for s[len(s)-1] == '0' {
		s = s[:len(s)-1]
	}
	return string(bytes.TrimSuffix([]byte(s), []byte(".")))
}
