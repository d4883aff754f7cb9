package capture

import (
	"context"
	"math/rand/v2"
	"time"
)

// RetryPolicy bounds how a Writer sends a frame again after a transient
// failure (a busy or briefly failing SQLite file, a PostgreSQL serialization
// failure, deadlock, terminated backend or dropped connection). A frame is
// counted failed only after its last attempt.
type RetryPolicy struct {
	// Attempts is the most attempts per frame, the first included.
	Attempts int
	// Backoff is the base wait before the second attempt; it doubles after
	// each attempt up to MaxBackoff, and each wait is drawn at random between
	// half of it and all of it (jitter), so writers that failed together do
	// not retry together.
	Backoff, MaxBackoff time.Duration
	// Budget bounds the whole write of one frame, every attempt and every
	// wait included: attempts run under a deadline Budget after the first
	// began, and no wait is started that would end past it. It is what keeps
	// the product path from stalling: Record returns within Budget.
	Budget time.Duration
}

// DefaultRetryPolicy: up to 8 attempts, waits from 50 ms doubling to at most
// 2 s, the whole frame within 15 s — enough to outlast a SQLite write lock
// held a few seconds past the 10 s busy timeout this module's DSN sets.
var DefaultRetryPolicy = RetryPolicy{Attempts: 8, Backoff: 50 * time.Millisecond, MaxBackoff: 2 * time.Second, Budget: 15 * time.Second}

// WithRetry sets the retry policy (default DefaultRetryPolicy). Attempts 1
// turns retries off; zero fields take the default's.
func WithRetry(p RetryPolicy) Option {
	return func(w *Writer) {
		if p.Attempts <= 0 {
			p.Attempts = DefaultRetryPolicy.Attempts
		}
		if p.Backoff <= 0 {
			p.Backoff = DefaultRetryPolicy.Backoff
		}
		if p.MaxBackoff <= 0 {
			p.MaxBackoff = DefaultRetryPolicy.MaxBackoff
		}
		if p.Budget <= 0 {
			p.Budget = DefaultRetryPolicy.Budget
		}
		w.retry = p
	}
}

// do runs op until it succeeds, fails for a reason that is not transient,
// or the policy is spent, and returns op's last error and how many attempts
// ran.
func (p RetryPolicy) do(ctx context.Context, op func(context.Context) error) (attempts int, err error) {
	deadline := time.Now().Add(p.Budget)
	actx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	wait := p.Backoff
	for attempts = 1; ; attempts++ {
		err = op(actx)
		if err == nil || attempts >= p.Attempts || ctx.Err() != nil || !transient(err) {
			return attempts, err
		}
		d := wait/2 + rand.N(wait/2+1)
		if time.Now().Add(d).After(deadline) {
			return attempts, err
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return attempts, err
		case <-t.C:
		}
		wait = min(2*wait, p.MaxBackoff)
	}
}
