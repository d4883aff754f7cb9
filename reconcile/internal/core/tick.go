package core

import (
	"context"
	"sync"
	"time"
)

// OnEveryTick calls tick every interval on a goroutine of its own, with a
// context that stop cancels, until tick returns false or stop is called;
// stop returns once the goroutine has ended, so nothing tick does outlives
// it. A tick that reads from the host's pool must not let that cancel reach
// a statement in flight (pgx closes a connection whose statement's context
// ends mid-flight): it waits for its connection under the context, and runs
// its statement under one stop does not end (pgsession's pollRow).
func OnEveryTick(ctx context.Context, interval time.Duration, tick func(ctx context.Context) (more bool)) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if ctx.Err() != nil || !tick(ctx) {
				return
			}
		}
	}()
	return sync.OnceFunc(func() { cancel(); <-done })
}
