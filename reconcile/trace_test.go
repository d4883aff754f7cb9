package reconcile_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/ops"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/reconcile"
)

// recorded is a tracer provider recording every span it ends.
func recorded() (*sdktrace.TracerProvider, *tracetest.SpanRecorder) {
	rec := tracetest.NewSpanRecorder()
	return sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)), rec
}

// attr is a span's attribute of that key, as text ("" when absent).
func attr(s sdktrace.ReadOnlySpan, key string) string {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value.String()
		}
	}
	return ""
}

// A traced Reconcile has one span for the call, one child per step with its
// status, and under the shape step one span per phase with its table, kind
// and lock class.
func TestTrace_SpanPerStepAndPhase(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		seedLegacyStore(t, db)
		tp, rec := recorded()
		opts := []reconcile.Option{quiet, reconcile.WithTracerProvider(tp)}
		if db.Dialect == dialect.Postgres {
			opts = append(opts, online...)
		}
		rep := mustReconcile(t, db, opts...)
		spans := rec.Ended()
		byName := map[string]sdktrace.ReadOnlySpan{}
		for _, s := range spans {
			byName[s.Name()] = s
		}
		root, ok := byName["schemastate.reconcile"]
		require.True(t, ok, "the call's span")
		require.Equal(t, string(db.Dialect), attr(root, "schemastate.dialect"))
		for _, st := range rep.Steps {
			s, ok := byName["schemastate.step "+st.Name]
			require.True(t, ok, "a span for step %s", st.Name)
			require.Equal(t, root.SpanContext().SpanID(), s.Parent().SpanID(), "step %s is the call's child", st.Name)
			require.Equal(t, string(st.Status), attr(s, "schemastate.status"))
		}
		shape := byName["schemastate.step "+reconcile.StepShape]
		ran := rep.Step(reconcile.StepShape).Phases
		require.NotEmpty(t, ran)
		for _, id := range ran {
			s, ok := byName["schemastate.phase "+id]
			require.True(t, ok, "a span for phase %s", id)
			require.Equal(t, shape.SpanContext().SpanID(), s.Parent().SpanID(), "phase %s is the shape step's child", id)
			require.Contains(t, id, attr(s, "schemastate.table")+".", "the phase's table")
			require.NotEmpty(t, attr(s, "schemastate.kind"))
			require.NotEmpty(t, attr(s, "schemastate.lock"))
			require.Equal(t, "ran", attr(s, "schemastate.result"))
		}
	})
}

// A failed step's span carries its error, and so does the call's.
func TestTrace_FailedStepCarriesItsError(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		tp, rec := recorded() // no host tables: the host_tables step fails
		_, err := reconcile.Reconcile(ctx, db.DB, quiet, reconcile.WithTracerProvider(tp))
		require.ErrorIs(t, err, ops.ErrHostTablesMissing)
		var step, root sdktrace.ReadOnlySpan
		for _, s := range rec.Ended() {
			switch s.Name() {
			case "schemastate.step " + reconcile.StepHostTables:
				step = s
			case "schemastate.reconcile":
				root = s
			}
		}
		for _, s := range []sdktrace.ReadOnlySpan{step, root} {
			require.NotNil(t, s)
			require.Equal(t, codes.Error, s.Status().Code, s.Name())
			require.Contains(t, s.Status().Description, "host tables", s.Name())
			require.NotEmpty(t, s.Events(), "%s records the error", s.Name())
			require.Equal(t, "exception", s.Events()[0].Name)
		}
		require.Equal(t, string(reconcile.Failed), attr(step, "schemastate.status"))
	})
}

// Without WithTracerProvider a Reconcile traces nothing, not even through a
// global provider the host set.
func TestTrace_NoProviderTracesNothing(t *testing.T) {
	tp, rec := recorded()
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { otel.SetTracerProvider(prev) })
	db := dbtest.Open(t, dialect.SQLite).Host(t)
	mustReconcile(t, db, quiet)
	require.Empty(t, rec.Ended())
}

// Without WithMeterProvider a Reconcile registers and counts nothing, not
// even through a global meter provider the host set.
func TestMetrics_NoProviderRegistersNothing(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	prev := otel.GetMeterProvider()
	otel.SetMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	t.Cleanup(func() { otel.SetMeterProvider(prev) })
	db := dbtest.Open(t, dialect.SQLite).Host(t)
	mustReconcile(t, db, quiet)
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(ctx, &rm))
	require.Empty(t, rm.ScopeMetrics)
}

// Given a meter provider, each Reconcile counts its steps by step and
// status, the rows the backfill wrote, and its duration by result; a
// certified boot's duration is told apart.
func TestMetrics_StepsRowsAndDuration(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		seedLegacyStore(t, db)
		seedHistory(t, db) // two subagents only the message history knows
		reader := sdkmetric.NewManualReader()
		opts := []reconcile.Option{quiet, reconcile.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))}
		rep := mustReconcile(t, db, opts...)
		mustReconcile(t, db, opts...) // certified
		var rm metricdata.ResourceMetrics
		require.NoError(t, reader.Collect(ctx, &rm))
		steps, rows := map[string]int64{}, map[string]int64{}
		durations := map[string]uint64{}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				switch m.Name {
				case reconcile.StepsMetric:
					for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
						step, _ := dp.Attributes.Value("step")
						status, _ := dp.Attributes.Value("status")
						steps[step.AsString()+"/"+status.AsString()] = dp.Value
					}
				case reconcile.RowsMetric:
					for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
						step, _ := dp.Attributes.Value("step")
						rows[step.AsString()] = dp.Value
					}
				case reconcile.DurationMetric:
					for _, dp := range m.Data.(metricdata.Histogram[float64]).DataPoints {
						result, _ := dp.Attributes.Value("result")
						certified, _ := dp.Attributes.Value("certified")
						durations[result.AsString()+"/"+certified.String()] = dp.Count
					}
				}
			}
		}
		for _, st := range rep.Steps {
			require.GreaterOrEqual(t, steps[st.Name+"/"+string(st.Status)], int64(1), "step %s counted as %s", st.Name, st.Status)
		}
		backfill := rep.Step(reconcile.StepBackfill)
		require.NotNil(t, backfill.Rows)
		require.Equal(t, int64(2), *backfill.Rows)
		require.Equal(t, *backfill.Rows, rows[reconcile.StepBackfill])
		require.Equal(t, map[string]uint64{"ok/false": 1, "ok/true": 1}, durations)
	})
}

// Long steps report progress; every step that ran reports its end.
func TestReconcile_ProgressReportsEachStep(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		seedLegacyStore(t, db)
		var mu sync.Mutex
		done := map[string]string{}
		var messages []string
		mustReconcile(t, db, reconcile.WithProgress(func(p reconcile.Progress) {
			mu.Lock()
			defer mu.Unlock()
			if p.Done {
				done[p.Step] = p.Message
			} else {
				messages = append(messages, p.Step+": "+p.Message)
			}
		}))
		want := map[string]string{"shape": "applied", "execution_since": "applied", "backfill": "applied"}
		if db.Dialect == dialect.Postgres {
			want["widen"] = "applied" // the legacy metrics are integer; the declaration says bigint
		}
		require.Equal(t, want, done)
		require.Contains(t, messages, "shape: applying task_session_subagents")
		if db.Dialect == dialect.SQLite {
			require.Contains(t, messages, "shape: rebuilding task_session_subagents: copying 3 rows", "rows when known")
		}
	})
}

// The progress callback is never called concurrently: the watcher's periodic
// report waits while the step's own report is still in the callback. The
// callback below keeps its state without any locking, as WithProgress allows;
// it stays in the step's first report for three watcher ticks, so a watcher
// that called it meanwhile is counted (and, under -race, reported as a race
// on calls).
func TestReconcile_ProgressCallbackIsSerialized(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		seedLegacyStore(t, db)
		var inside, overlapped atomic.Int32
		var calls []reconcile.Progress // deliberately unguarded
		slept := false
		mustReconcile(t, db, reconcile.WithProgress(func(p reconcile.Progress) {
			if inside.Add(1) > 1 {
				overlapped.Add(1)
			}
			defer inside.Add(-1)
			calls = append(calls, p)
			if !slept && p.Message == "applying task_session_subagents" {
				slept = true
				time.Sleep(800 * time.Millisecond)
			}
		}))
		require.True(t, slept, "the shape step reported its table")
		require.Zero(t, overlapped.Load(), "the callback was entered while another call was in it")
		var ticks int
		for _, p := range calls {
			if p.Step == reconcile.StepShape && p.Elapsed >= 250*time.Millisecond && !p.Done {
				ticks++
			}
		}
		require.NotZero(t, ticks, "the watcher reported while the step was slow")
	})
}
