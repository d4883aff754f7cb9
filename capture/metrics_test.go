package capture_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/schemastate/schemastate/capture"
	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
)

// frames collects the reader's schemastate.capture.frames series, by outcome; nil when
// the metric is not there.
func framesSeries(t *testing.T, r sdkmetric.Reader) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, r.Collect(context.Background(), &rm))
	var out map[string]int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "schemastate.capture.frames" {
				continue
			}
			sum, ok := m.Data.(metricdata.Sum[int64])
			require.True(t, ok, "an int64 sum")
			require.True(t, sum.IsMonotonic)
			out = map[string]int64{}
			for _, dp := range sum.DataPoints {
				v, _ := dp.Attributes.Value("outcome")
				out[v.AsString()] = dp.Value
			}
		}
	}
	return out
}

// Given a meter provider, the writer's counters are the observable counter
// schemastate.capture.frames, one series per outcome, equal to Counters; after Close the
// writer publishes nothing.
func TestMetrics_WriterCountersThroughTheMeterProvider(t *testing.T) {
	eachStore(t, func(t *testing.T, s *store) {
		reader := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		w := writer(t, s.DB.DB, s.Dialect, capture.WithMeterProvider(mp), s.logger())
		ctx := context.Background()
		for _, f := range []capture.Frame{
			frame("toolu_1", at(0)),
			frame("toolu_2", at(0), func(f *capture.Frame) { f.Subagent.TotalTokens = -9 }),
			frame("", at(0)),
		} {
			_ = w.Record(ctx, f)
		}
		c := w.Counters()
		require.Equal(t, map[string]int64{
			"attempted": c.Attempted, "persisted": c.Persisted, "skipped_no_identity": c.SkippedNoIdentity,
			"failed": c.Failed, "anomalous_value": c.AnomalousValue, "unstorable_text": c.UnstorableText,
			"unknown_execution": c.UnknownExecution, "retried": c.Retried,
		}, framesSeries(t, reader))
		require.Equal(t, int64(3), c.Attempted)
		require.NoError(t, w.Close())
		require.Nil(t, framesSeries(t, reader), "nothing published once the writer is closed")
	})
}

// Without WithMeterProvider the writer registers nothing, not even with a
// global meter provider the host set.
func TestMetrics_NoProviderRegistersNothing(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	prev := otel.GetMeterProvider()
	otel.SetMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	t.Cleanup(func() { otel.SetMeterProvider(prev) })
	db := dbtest.Open(t, dialect.SQLite)
	s := newStore(t, db)
	require.NoError(t, s.w.Record(context.Background(), frame("toolu_1", at(0))))
	require.Nil(t, framesSeries(t, reader))
}
