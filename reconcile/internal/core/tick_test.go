package core

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// stop waits for a tick in flight and never cancels its context: a tick's
// query on the host's pool must finish, or pgx closes the connection.
func TestOnEveryTick_StopWaitsForTheTickInFlightWithoutCancellingIt(t *testing.T) {
	started := make(chan struct{})
	var cancelled, finished atomic.Bool
	stop := OnEveryTick(context.Background(), time.Millisecond, func(ctx context.Context) bool {
		close(started)
		select {
		case <-ctx.Done():
			cancelled.Store(true)
		case <-time.After(100 * time.Millisecond):
		}
		finished.Store(true)
		return false
	})
	<-started
	stop()
	require.True(t, finished.Load(), "stop returned before the tick ended")
	require.False(t, cancelled.Load(), "stop cancelled the tick's context")
	stop() // a second stop is harmless
}

// The parent's context still reaches the tick, and ends the ticking.
func TestOnEveryTick_TheParentContextEndsTheTick(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var ticks atomic.Int32
	stop := OnEveryTick(ctx, time.Millisecond, func(ctx context.Context) bool {
		if ticks.Add(1) == 1 {
			cancel()
		}
		<-ctx.Done()
		return true
	})
	<-ctx.Done()
	stop()
	require.Equal(t, int32(1), ticks.Load())
}
