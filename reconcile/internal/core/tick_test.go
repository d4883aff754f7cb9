package core

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// stop ends a tick that waits (for a connection, say) by cancelling its
// context, and returns only once the tick has returned.
func TestOnEveryTick_StopCancelsAWaitingTickAndWaitsForIt(t *testing.T) {
	started := make(chan struct{})
	var ended atomic.Bool
	stop := OnEveryTick(context.Background(), time.Millisecond, func(ctx context.Context) bool {
		close(started)
		<-ctx.Done()
		ended.Store(true)
		return true
	})
	<-started
	stop()
	require.True(t, ended.Load(), "stop returned before the tick ended")
	stop() // a second stop is harmless
}

// The parent's context ends the ticking too.
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
