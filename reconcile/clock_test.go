package reconcile_test

import (
	"sync"
	"time"

	"github.com/schemastate/schemastate/reconcile"
)

// The test clock: the execution_since and backfill-key tests (AC-24) tell
// the instants a reconcile sampled apart by reading its own clock at its
// failpoints.

// tickingClock is a clock for reconcile.WithClock that moves on an hour at
// every reading, from the real time: a key sampled from it before a reading
// the test took is at least an hour earlier than that reading, and a key
// sampled from any other clock (time.Now, the database's) precedes every
// reading — no sleep is needed to tell the instants apart.
func tickingClock() func() time.Time {
	var mu sync.Mutex
	now := time.Now()
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		now = now.Add(time.Hour)
		return now
	}
}

// clockAt is the options of a reconcile whose clock is a tickingClock and
// whose failpoints read that clock at each of points: read[point] is what
// the clock said there.
func clockAt(points ...string) (opts []reconcile.Option, read map[string]time.Time) {
	clock, read := tickingClock(), map[string]time.Time{}
	return []reconcile.Option{reconcile.WithClock(clock), reconcile.WithFailpoint(func(p string) error {
		for _, want := range points {
			if p == want {
				read[p] = clock()
			}
		}
		return nil
	})}, read
}
