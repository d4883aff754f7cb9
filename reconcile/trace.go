package reconcile

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/schemastate/schemastate/internal/ops"
)

// instrumentationName names the tracer the reconcile's spans come from.
const instrumentationName = "github.com/schemastate/schemastate/reconcile"

// WithTracerProvider traces each Reconcile through tp: a span
// "schemastate.reconcile" for the whole call, a child per step
// ("schemastate.step <name>": its status, statements, rows and phases; a
// failed step's error) and, under the shape and widen steps, one per phase
// it ran or found done ("schemastate.phase <id>": its table, kind, lock
// class, whether it scans, what the host waits on, and its result). Without
// it nothing is traced, and no global provider is read.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *options) {
		if tp != nil {
			o.tracer = tp.Tracer(instrumentationName, trace.WithInstrumentationVersion(plannerVersion))
		}
	}
}

// beginTrace starts the Reconcile's span; the steps' spans are its children.
func (r *run) beginTrace(ctx context.Context) context.Context {
	ctx, span := r.o.tracer.Start(ctx, "schemastate.reconcile", trace.WithAttributes(attribute.String("schemastate.dialect", string(r.o.dialect))))
	r.traceCtx, r.root = ctx, span
	return ctx
}

// endTrace ends the Reconcile's span, with the report's error if any.
func (r *run) endTrace() {
	if r.root == nil {
		return
	}
	r.root.SetAttributes(attribute.Bool("schemastate.certified", r.rep.Certified))
	if err := r.rep.Err(); err != nil {
		r.root.RecordError(err)
		r.root.SetStatus(codes.Error, err.Error())
	}
	r.root.End()
}

// beginStep starts the span of a step whose phases run under it, and
// returns ctx carrying it.
func (r *run) beginStep(ctx context.Context, name string) context.Context {
	if r.traceCtx == nil {
		return ctx
	}
	_, r.open = r.o.tracer.Start(r.traceCtx, "schemastate.step "+name, trace.WithAttributes(attribute.String("schemastate.step", name)))
	r.openName = name
	return trace.ContextWithSpan(ctx, r.open)
}

// traceStep ends the span of a step as recorded: the one beginStep started,
// or one spanning its Duration up to now.
func (r *run) traceStep(s Step) {
	if r.traceCtx == nil {
		return
	}
	span := r.open
	if span == nil || r.openName != s.Name {
		_, span = r.o.tracer.Start(r.traceCtx, "schemastate.step "+s.Name, trace.WithTimestamp(time.Now().Add(-s.Duration)),
			trace.WithAttributes(attribute.String("schemastate.step", s.Name)))
	} else {
		r.open, r.openName = nil, ""
	}
	span.SetAttributes(attribute.String("schemastate.status", string(s.Status)), attribute.Int("schemastate.statements", s.Statements))
	if len(s.Phases) > 0 {
		span.SetAttributes(attribute.StringSlice("schemastate.phases", s.Phases))
	}
	if s.Rows != nil {
		span.SetAttributes(attribute.Int64("schemastate.rows", *s.Rows))
	}
	if s.Status == Failed && s.Err != nil {
		span.RecordError(s.Err)
		span.SetStatus(codes.Error, s.Err.Error())
	}
	span.End()
}

// tracePhase starts the span of one phase under the step's span in ctx; its
// end takes whether the phase ran and its error.
func (r *run) tracePhase(ctx context.Context, ph ops.Phase) func(ran bool, err error) {
	if r.traceCtx == nil {
		return func(bool, error) {}
	}
	_, span := r.o.tracer.Start(ctx, "schemastate.phase "+ph.ID(), trace.WithAttributes(
		attribute.String("schemastate.table", ph.Table),
		attribute.String("schemastate.phase", ph.Name),
		attribute.String("schemastate.kind", string(ph.Kind)),
		attribute.String("schemastate.lock", string(ph.Lock)),
		attribute.Bool("schemastate.scans", ph.Scans),
		attribute.String("schemastate.host_waits", hostWaits(ph.Lock)),
	))
	return func(ran bool, err error) {
		result := "done_before"
		switch {
		case err != nil:
			result = "failed"
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		case ran:
			result = "ran"
		}
		span.SetAttributes(attribute.String("schemastate.result", result))
		span.End()
	}
}
