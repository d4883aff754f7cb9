package reconcile

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// The reconcile's metrics (WithMeterProvider).
const (
	// stepsMetric counts the steps of every Reconcile, by "step" and
	// "status" (applied, unchanged, skipped, failed, in_progress).
	stepsMetric = "schemastate.reconcile.steps"
	// rowsMetric counts the rows a step wrote (the backfill's), by "step".
	rowsMetric = "schemastate.reconcile.rows"
	// durationMetric is each Reconcile's duration in seconds, by "result"
	// (ok or failed) and "certified" (the boot took the certified fast path).
	durationMetric = "schemastate.reconcile.duration"
)

// WithMeterProvider counts each Reconcile's steps, the rows they wrote and
// its duration through mp (stepsMetric, rowsMetric, durationMetric). Without
// it nothing is registered or counted, and no global provider is read.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(o *options) { o.meters = mp }
}

// meters are one Reconcile's instruments.
type meters struct {
	steps    metric.Int64Counter
	rows     metric.Int64Counter
	duration metric.Float64Histogram
}

// newMeters creates the instruments from mp; nil when mp is nil or an
// instrument cannot be created (then nothing is counted).
func newMeters(mp metric.MeterProvider) *meters {
	if mp == nil {
		return nil
	}
	m := mp.Meter(instrumentationName, metric.WithInstrumentationVersion(plannerVersion))
	steps, err1 := m.Int64Counter(stepsMetric, metric.WithUnit("{step}"), metric.WithDescription("reconcile steps, by step and status"))
	rows, err2 := m.Int64Counter(rowsMetric, metric.WithUnit("{row}"), metric.WithDescription("rows a reconcile step wrote, by step"))
	duration, err3 := m.Float64Histogram(durationMetric, metric.WithUnit("s"), metric.WithDescription("a Reconcile's duration, by result"))
	if err1 != nil || err2 != nil || err3 != nil {
		return nil
	}
	return &meters{steps: steps, rows: rows, duration: duration}
}

// countStep adds a recorded step to the counters.
func (m *meters) countStep(s Step) {
	if m == nil {
		return
	}
	ctx := context.Background()
	m.steps.Add(ctx, 1, metric.WithAttributes(attribute.String("step", s.Name), attribute.String("status", string(s.Status))))
	if s.Rows != nil && *s.Rows > 0 {
		m.rows.Add(ctx, *s.Rows, metric.WithAttributes(attribute.String("step", s.Name)))
	}
}

// observe records a finished Reconcile's duration.
func (m *meters) observe(d time.Duration, rep *Report) {
	if m == nil {
		return
	}
	result := "ok"
	if rep.Err() != nil {
		result = "failed"
	}
	m.duration.Record(context.Background(), d.Seconds(), metric.WithAttributes(attribute.String("result", result), attribute.Bool("certified", rep.Certified)))
}
