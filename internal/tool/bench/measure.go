package bench

import (
	"fmt"
	"sort"
	"time"

	"github.com/schemastate/schemastate/internal/tool/bench/render"
)

// timed is one side of a measurement: it returns the duration to record,
// which may be a step's own Duration rather than its wall time.
type timed func(run int) (time.Duration, error)

type anchorRun struct {
	name, is string
	fn       timed
}

// measure runs the floor, ours and every anchor runs times each, in turn,
// and records the medians. An anchor that fails is recorded with its error
// and not run again; ours or the floor failing fails the measurement.
func (b *bench) measure(m *render.Measurement, runs int, ours, floor timed, anchors ...anchorRun) error {
	m.Anchors = nil
	for _, a := range anchors {
		m.Anchors = append(m.Anchors, render.Anchor{Name: a.name, Is: a.is})
	}
	for i := 0; i < runs; i++ {
		b.say("%s at %d %s: run %d/%d", m.Name, m.N, m.Family, i+1, runs)
		f, err := floor(i)
		if err != nil {
			return fmt.Errorf("%s floor at %d %s: %w", m.Name, m.N, m.Family, err)
		}
		o, err := ours(i)
		if err != nil {
			return fmt.Errorf("%s at %d %s: %w", m.Name, m.N, m.Family, err)
		}
		m.OursRuns = append(m.OursRuns, o)
		m.FloorRuns = append(m.FloorRuns, f)
		for j, a := range anchors {
			an := &m.Anchors[j]
			if an.Err != "" {
				continue
			}
			d, err := a.fn(i)
			if err != nil {
				an.Err = err.Error()
				continue
			}
			an.Runs = append(an.Runs, d)
		}
	}
	m.Ours, m.Floor = median(m.OursRuns), median(m.FloorRuns)
	for j := range m.Anchors {
		m.Anchors[j].Median = median(m.Anchors[j].Runs)
	}
	if m.Floor > 0 {
		m.Ratio = float64(m.Ours) / float64(m.Floor)
	}
	if m.Target > 0 {
		met := m.Ratio <= m.Target
		m.Met = &met
	}
	return nil
}

// medianOf times fn n times and returns the median.
func medianOf(n int, fn func() error) (time.Duration, error) {
	var ds []time.Duration
	for i := 0; i < n; i++ {
		t0 := time.Now()
		if err := fn(); err != nil {
			return 0, err
		}
		ds = append(ds, time.Since(t0))
	}
	return median(ds), nil
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
