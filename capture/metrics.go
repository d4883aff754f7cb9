package capture

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	otelmetric "go.opentelemetry.io/otel/metric"
)

// instrumentationName names the meter the writer's metrics come from.
const instrumentationName = "github.com/schemastate/schemastate/capture"

// framesMetric is the name of the writer's counter of observed frames.
const framesMetric = "schemastate.capture.frames"

// WithMeterProvider publishes the Writer's counters (Counters) as the
// observable counter schemastate.capture.frames through mp, one series per
// outcome (the attribute "outcome": attempted, persisted,
// skipped_no_identity, failed, anomalous_value, unstorable_text,
// unknown_execution, retried — the fields of Counters): read when the host's reader
// collects, never on Record's path. Without it nothing is registered. Close
// unregisters it. A registration that fails is logged and leaves the Writer
// as it would be without the option.
func WithMeterProvider(mp otelmetric.MeterProvider) Option {
	return func(w *Writer) { w.meters = mp }
}

// registerMetrics registers the Writer's counter with its meter provider.
func (w *Writer) registerMetrics() error {
	meter := w.meters.Meter(instrumentationName)
	frames, err := meter.Int64ObservableCounter(framesMetric, otelmetric.WithUnit("{frame}"),
		otelmetric.WithDescription("frames the writer observed, by outcome"))
	if err != nil {
		return err
	}
	reg, err := meter.RegisterCallback(func(_ context.Context, o otelmetric.Observer) error {
		c := w.Counters()
		for _, kv := range []struct {
			outcome string
			n       int64
		}{
			{"attempted", c.Attempted}, {"persisted", c.Persisted}, {"skipped_no_identity", c.SkippedNoIdentity},
			{"failed", c.Failed}, {"anomalous_value", c.AnomalousValue}, {"unstorable_text", c.UnstorableText},
			{"unknown_execution", c.UnknownExecution}, {"retried", c.Retried},
		} {
			o.ObserveInt64(frames, kv.n, otelmetric.WithAttributes(attribute.String("outcome", kv.outcome)))
		}
		return nil
	}, frames)
	if err != nil {
		return err
	}
	w.metricReg = reg
	return nil
}

// unregisterMetrics ends the Writer's metric registration, if any.
func (w *Writer) unregisterMetrics() error {
	w.stmtMu.Lock()
	reg := w.metricReg
	w.metricReg = nil
	w.stmtMu.Unlock()
	if reg == nil {
		return nil
	}
	return reg.Unregister()
}
