package reconcile

import (
	"context"
	"time"

	"github.com/schemastate/schemastate/reconcile/internal/core"
)

// progressTick is how often a running step reports its elapsed time.
const progressTick = 250 * time.Millisecond

// progress records what the current step is doing; the watcher repeats it
// with the elapsed time until the step ends.
func (r *run) progress(step, msg string) {
	r.mu.Lock()
	r.doing = msg
	r.mu.Unlock()
	r.emit(Progress{Step: step, Message: msg, Elapsed: time.Since(r.stepStart)})
}

// emit reports p to the observers. Both the step and its watcher report, so
// every event goes through one mutex (options.notify): the callback is never
// called concurrently, and a report is never interleaved with another
// (WithProgress).
func (r *run) emit(p Progress) { _ = r.o.notify(event{Kind: eventProgress, Progress: p}) }

// watch reports a step's elapsed time while it runs, so a step that takes
// seconds (a rebuild, a backfill) shows it is alive. The returned func stops
// the watcher and reports the step's final status.
func (r *run) watch(step string) func(status string) {
	r.stepStart = time.Now()
	r.mu.Lock()
	r.doing = "running"
	r.mu.Unlock()
	if !r.o.observed() {
		return func(string) {}
	}
	stop := core.OnEveryTick(context.Background(), progressTick, func(context.Context) bool {
		r.mu.Lock()
		msg := r.doing
		r.mu.Unlock()
		r.emit(Progress{Step: step, Message: msg, Elapsed: time.Since(r.stepStart)})
		return true
	})
	return func(status string) {
		stop()
		r.emit(Progress{Step: step, Message: status, Elapsed: time.Since(r.stepStart), Done: true})
	}
}
