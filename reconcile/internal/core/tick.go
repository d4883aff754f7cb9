package core

import (
	"context"
	"sync"
	"time"
)

// OnEveryTick calls tick every interval on a goroutine of its own until tick
// returns false, ctx ends or stop is called; stop returns once the goroutine
// has ended, so nothing tick does outlives it.
//
// stop never cancels a tick in flight: it waits for it. The context tick is
// given ends with ctx alone. A tick's query is a short catalog read on a
// connection of the host's pool, and pgx closes a connection whose query's
// context ends mid-flight, so cancelling it would take a connection (with
// whatever the host SET on it) out of the host's pool at every stop that
// met a tick.
func OnEveryTick(ctx context.Context, interval time.Duration, tick func(ctx context.Context) (more bool)) (stop func()) {
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-quit:
				return
			case <-t.C:
			}
			select { // a tick met stop or ctx's end: they win, no tick starts
			case <-quit:
				return
			case <-ctx.Done():
				return
			default:
			}
			if !tick(ctx) {
				return
			}
		}
	}()
	return sync.OnceFunc(func() { close(quit); <-done })
}
