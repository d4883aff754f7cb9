package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/schemastate/schemastate/health"
	"github.com/schemastate/schemastate/keys"
)

// healthBench measures health.Evaluate (the shortfall and excess anti-joins,
// the collision count and the scoped MAX, in one read transaction) against
// one full scan of the message predicate with the same normalization and
// the same :since window (health.FloorQuery). It runs on the store the
// rebuild left: pre-amendment keys, capture_since in the middle of history.
func (b *bench) health(ctx context.Context, rep *Report) error {
	ks, err := keys.Read(ctx, b.db, b.d)
	if err != nil {
		return err
	}
	if ks.CaptureSince == nil {
		return fmt.Errorf("%w: no capture_since for the health window", errUnexpected)
	}
	bound, err := keys.NewBoundary(*ks.CaptureSince)
	if err != nil {
		return err
	}
	floorQ := health.FloorQuery(b.d)
	var verdict health.Verdict
	var window int64
	m, err := b.measure(Health, "one full scan of the qualifying-message predicate, same normalization and window (health.FloorQuery)", 1.5,
		func(int) (time.Duration, error) {
			t0 := time.Now()
			r, err := health.Evaluate(ctx, b.db)
			if err != nil {
				return 0, err
			}
			verdict = r.Verdict
			return time.Since(t0), nil
		},
		func(int) (time.Duration, error) {
			t0 := time.Now()
			if err := b.db.QueryRowContext(ctx, floorQ, bound.Arg()).Scan(&window); err != nil {
				return 0, err
			}
			return time.Since(t0), nil
		})
	if err != nil {
		return err
	}
	m.Detail = fmt.Sprintf("verdict %s; %d subagent messages in the window since capture_since=%s", verdict, window, *ks.CaptureSince)
	rep.Measurements = append(rep.Measurements, m)
	return nil
}
