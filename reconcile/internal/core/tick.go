package core

import (
	"context"
	"time"
)

// OnEveryTick calls tick every interval on a goroutine of its own, with a
// context that stop cancels, until tick returns false or stop is called;
// stop returns once the goroutine has ended, so nothing tick does outlives it.
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
			if !tick(ctx) {
				return
			}
		}
	}()
	return func() { cancel(); <-done }
}
