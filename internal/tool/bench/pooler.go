package bench

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/schemastate/schemastate/capture"
	"github.com/schemastate/schemastate/internal/tool/bench/render"
	"github.com/schemastate/schemastate/reconcile"
)

// Measurements through a connection pooler (Config.PoolerDSN: the same
// database behind PgBouncer in transaction mode). Ours is the operation
// through the pooler, the floor the same operation on the same store direct,
// in the same run: the ratio is what the pooler costs. Their names are
// render.PoolerBoot and the others beside it.

// openPooled opens cfg.PoolerDSN and checks that it reaches the store the
// direct pool does (same database, same schema: PgBouncer cannot carry a
// search_path, so the store must be in the database's default schema).
func (b *bench) openPooled(ctx context.Context) (*sql.DB, error) {
	db, err := sql.Open("pgx", b.cfg.PoolerDSN)
	if err != nil {
		return nil, err
	}
	where := func(q *sql.DB) (string, error) {
		var s string
		err := q.QueryRowContext(ctx, `SELECT current_database() || '.' || current_schema()`).Scan(&s)
		return s, err
	}
	direct, err := where(b.db)
	if err != nil {
		db.Close()
		return nil, err
	}
	pooled, err := where(db)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("bench: the pooler: %w", err)
	}
	if pooled != direct {
		db.Close()
		return nil, fmt.Errorf("bench: the pooler reaches %s, the store is %s (point --db at the pooler's database without a search_path)", pooled, direct)
	}
	return db, nil
}

// pooler measures, on the store of n rows, the boot from the legacy state,
// the steady-state boot and live capture through the pooler against the
// same direct.
func (b *bench) pooler(ctx context.Context, rep *render.Report, n int) error {
	pooled, err := b.openPooled(ctx)
	if err != nil {
		return err
	}
	defer pooled.Close()
	runs := b.cfg.runsAt(n)
	boot := func(db *sql.DB) timed {
		return func(int) (time.Duration, error) {
			if err := b.restoreLegacy(ctx); err != nil {
				return 0, err
			}
			t0 := time.Now()
			r, err := reconcile.Reconcile(ctx, db, reconcile.WithLogger(b.quiet))
			el := time.Since(t0)
			if err != nil {
				return 0, err
			}
			if s := r.Step(reconcile.StepShape); s == nil || s.Status != reconcile.Applied {
				return 0, fmt.Errorf("%w: shape step %v", errUnexpected, s)
			}
			return el, nil
		}
	}
	m := render.Measurement{Name: render.PoolerBoot, Family: render.FamilyRows, N: n, Rows: n,
		OursIs:  "reconcile.Reconcile on the legacy store through PgBouncer in transaction mode, in process, wall time (the lock's transaction and every step through the pooler)",
		FloorIs: "the same reconcile of the same restored store, direct"}
	if err := b.measure(&m, runs, boot(pooled), boot(b.db)); err != nil {
		return err
	}
	m.Detail = versus(m)
	rep.Measurements = append(rep.Measurements, m)

	// The last run left the store reconciled (ours runs after the floor); one
	// untimed boot more finds nothing to change and certifies it.
	if _, err := reconcile.Reconcile(ctx, b.db, reconcile.WithLogger(b.quiet)); err != nil {
		return err
	}
	steady := func(db *sql.DB) timed {
		return func(int) (time.Duration, error) {
			t0 := time.Now()
			for range steadyBoots {
				r, err := reconcile.Reconcile(ctx, db, reconcile.WithLogger(b.quiet))
				if err != nil {
					return 0, err
				}
				if !r.Certified || r.Step(reconcile.StepLock).Status != reconcile.Unchanged {
					return 0, fmt.Errorf("%w: a steady-state boot took the lock: %v", errUnexpected, r.Step(reconcile.StepLock))
				}
			}
			return time.Since(t0) / steadyBoots, nil
		}
	}
	ms := render.Measurement{Name: render.PoolerSteady, Family: render.FamilyRows, N: n, Rows: n,
		OursIs:  fmt.Sprintf("reconcile.Reconcile on the store in its declared shape through PgBouncer in transaction mode (each run the mean of %d boots)", steadyBoots),
		FloorIs: fmt.Sprintf("the same boots direct (each run the mean of %d)", steadyBoots)}
	if err := b.measure(&ms, runs, steady(pooled), steady(b.db)); err != nil {
		return err
	}
	ms.Detail = versus(ms)
	rep.Measurements = append(rep.Measurements, ms)

	return b.poolerCapture(ctx, rep, n, pooled, runs)
}

// versus is a pooled measurement's detail: both medians, the runs behind
// them, and the difference.
func versus(m render.Measurement) string {
	diff := (m.Ours - m.Floor).Round(10 * time.Microsecond)
	sign := "+"
	if diff < 0 {
		sign = ""
	}
	return fmt.Sprintf("%s through the pooler vs %s direct (%s%s; runs %v vs %v)", m.Ours.Round(10*time.Microsecond), m.Floor.Round(10*time.Microsecond),
		sign, diff, roundAll(m.OursRuns), roundAll(m.FloorRuns))
}

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(10 * time.Microsecond)
	}
	return out
}

// poolerCapture records cfg.Frames frames through capture.Writer through
// the pooler and direct, from one writer and from captureWriters.
func (b *bench) poolerCapture(ctx context.Context, rep *render.Report, n int, pooled *sql.DB, runs int) error {
	sessions, err := b.captureSessions(ctx)
	if err != nil {
		return err
	}
	frames := b.cfg.Frames
	record := func(db *sql.DB, writers int) timed {
		return func(run int) (time.Duration, error) {
			w, err := capture.NewWriter(ctx, db, b.d, capture.WithLogger(b.quiet))
			if err != nil {
				return 0, err
			}
			defer w.Close()
			el, err := fanOut(frames, writers, func(i int) error {
				return w.Record(ctx, captureFrame(sessions[i%len(sessions)], "turn-pool-", "toolu_poolbench_", run, i))
			})
			if err != nil {
				return 0, err
			}
			_, err = b.db.ExecContext(ctx, `DELETE FROM task_session_subagents WHERE tool_call_id LIKE 'toolu_poolbench_%'`)
			return el, err
		}
	}
	rate := func(d time.Duration) float64 { return float64(frames) / d.Seconds() }
	for _, c := range []struct {
		name    string
		writers int
	}{{render.PoolerCapture, 1}, {render.PoolerCaptureConcurrent, captureWriters}} {
		m := render.Measurement{Name: c.name, Family: render.FamilyRows, N: n, Rows: n, Count: frames,
			OursIs:  fmt.Sprintf("%d async_launched frames through capture.Writer.Record from %d writer(s), through PgBouncer in transaction mode", frames, c.writers),
			FloorIs: fmt.Sprintf("the same %d frames from %d writer(s), direct", frames, c.writers)}
		if err := b.measure(&m, runs, record(pooled, c.writers), record(b.db, c.writers)); err != nil {
			return err
		}
		m.Detail = fmt.Sprintf("%.0f frames/s through the pooler vs %.0f direct (%.2f× the direct rate)", rate(m.Ours), rate(m.Floor), rate(m.Ours)/rate(m.Floor))
		rep.Measurements = append(rep.Measurements, m)
	}
	return nil
}
