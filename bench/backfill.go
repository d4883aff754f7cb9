package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/reconcile"
)

// errStopBackfill is returned from the backfill's first failpoint to leave a
// store with the amended table and no backfilled rows (the floor's start).
var errStopBackfill = errors.New("bench: backfill stopped before its INSERT")

// The bare INSERT … SELECT: the same rows the backfill writes, from the same
// messages, with nothing the generated store does not need — no guard, no
// MAX, no defensive JSON normalization beyond the three non-JSON metadata
// forms the store holds (NULL, the empty string, 'null'), no duplicate
// ranking, no key writes.
const floorColumns = `id, task_session_id, task_id, turn_id, agent_execution_id, tool_call_id,
	parent_tool_call_id, subagent_type, description, agent_id, child_session_id, model,
	agent_status, tool_status, is_async, total_tokens, tool_use_count, duration_ms, source,
	observed_at, settled_at, updated_at`

func floorBackfillSQL(d dialect.Dialect) string {
	var get, num, flag, where, from string
	if d == dialect.Postgres {
		get = "j #>> '{%s}'"
		num = "(j #>> '{%s}')::bigint"
		flag = "CASE WHEN j #>> '{%s}' = 'true' THEN 1 ELSE 0 END"
		from = `(SELECT m.*, CASE WHEN m.metadata IS NULL OR m.metadata IN ('', 'null') THEN NULL ELSE m.metadata::jsonb END AS j FROM task_session_messages m) m`
		where = "j #>> '{normalized,kind}' = 'subagent_task'"
	} else {
		get = "json_extract(m.metadata, '$.%s')"
		num = get
		flag = "COALESCE(json_extract(m.metadata, '$.%s'), 0)"
		from = "task_session_messages m"
		where = "CASE WHEN json_valid(m.metadata) THEN json_extract(m.metadata, '$.normalized.kind') END = 'subagent_task'"
	}
	path := func(f string, p ...string) string {
		if d == dialect.Postgres {
			return fmt.Sprintf(f, strings.Join(p, ","))
		}
		return fmt.Sprintf(f, strings.Join(p, "."))
	}
	st := func(f, field string) string { return path(f, "normalized", "subagent_task", field) }
	return `INSERT INTO task_session_subagents (` + floorColumns + `)
SELECT m.id, m.task_session_id, m.task_id, m.turn_id, 'unknown', ` + path(get, "tool_call_id") + `,
	` + path(get, "parent_tool_call_id") + `, ` + st(get, "subagent_type") + `, ` + st(get, "description") + `,
	` + st(get, "agent_id") + `, ` + st(get, "child_session_id") + `, ` + st(get, "model") + `,
	` + st(get, "status") + `, ` + path(get, "status") + `, ` + st(flag, "is_async") + `,
	` + st(num, "total_tokens") + `, ` + st(num, "tool_use_count") + `, ` + st(num, "duration_ms") + `, 'backfill',
	m.created_at, CASE WHEN ` + path(get, "status") + ` IN ('complete', 'completed', 'success', 'error', 'failed', 'cancelled') THEN m.updated_at END, m.updated_at
FROM ` + from + `
WHERE ` + where
}

// backfill measures the reconciler's backfill step on the predating store
// (the step's own Duration) against the bare INSERT … SELECT of the same
// rows into the same freshly created table. Both start from the history
// alone; the floor's table is created by a reconcile stopped at the
// backfill's first failpoint.
func (b *bench) backfill(ctx context.Context, rep *Report) error {
	var maxes, inserts []time.Duration
	var rows int64
	m, err := b.measure(Backfill, "bare INSERT … SELECT of the same rows (no guard, MAX, normalization, ranking or keys)", 1.3,
		func(int) (time.Duration, error) {
			if err := b.restorePredating(ctx); err != nil {
				return 0, err
			}
			var tMax, tInsert, tScan time.Time
			fp := func(point string) error {
				switch point {
				case reconcile.FailpointBackfillMaxTaken:
					tMax = time.Now()
				case reconcile.FailpointBackfillInserted:
					tInsert = time.Now()
				}
				return nil
			}
			progress := func(p reconcile.Progress) {
				if p.Step == reconcile.StepBackfill && tScan.IsZero() && strings.HasPrefix(p.Message, "computing") {
					tScan = time.Now()
				}
			}
			r, err := reconcile.Reconcile(ctx, b.db, reconcile.WithLogger(b.quiet), reconcile.WithFailpoint(fp), reconcile.WithProgress(progress))
			if err != nil {
				return 0, err
			}
			s := r.Step(reconcile.StepBackfill)
			if s.Status != reconcile.Applied || s.Rows == nil {
				return 0, fmt.Errorf("%w: backfill step %s: %s", errUnexpected, s.Status, s.Detail)
			}
			if *s.Rows != rows {
				return 0, fmt.Errorf("%w: backfill wrote %d rows, the floor %d", errUnexpected, *s.Rows, rows)
			}
			if !tScan.IsZero() && !tMax.IsZero() && !tInsert.IsZero() {
				maxes = append(maxes, tMax.Sub(tScan))
				inserts = append(inserts, tInsert.Sub(tMax))
			}
			return s.Duration, nil
		},
		func(int) (time.Duration, error) {
			if err := b.restorePredating(ctx); err != nil {
				return 0, err
			}
			stop := func(point string) error {
				if point == reconcile.FailpointBackfillMaxTaken {
					return errStopBackfill
				}
				return nil
			}
			r, _ := reconcile.Reconcile(ctx, b.db, reconcile.WithLogger(b.quiet), reconcile.WithFailpoint(stop))
			if s := r.Step(reconcile.StepBackfill); s == nil || s.Status != reconcile.Failed {
				return 0, fmt.Errorf("%w: the floor's setup reconcile did not stop at the backfill", errUnexpected)
			}
			d, n, err := b.floorInsert(ctx)
			rows = n
			return d, err
		})
	if err != nil {
		return err
	}
	if len(maxes) > 0 {
		m.Detail = fmt.Sprintf("%d rows; MAX(created_at) over the source predicate (AC-24d, a full scan before the INSERT) %s median, the INSERT … SELECT %s median; the rest is the guard, key writes and transaction",
			rows, median(maxes).Round(time.Microsecond), median(inserts).Round(time.Microsecond))
	}
	rep.Measurements = append(rep.Measurements, m)
	return nil
}

// floorInsert runs the bare INSERT … SELECT in the transaction shape the
// backfill step has: inside BEGIN IMMEDIATE without its COMMIT on SQLite
// (the reconcile commits all steps at once, outside the step), as its own
// transaction with COMMIT on PostgreSQL.
func (b *bench) floorInsert(ctx context.Context) (time.Duration, int64, error) {
	conn, err := b.db.Conn(ctx)
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close()
	q := floorBackfillSQL(b.d)
	if b.d == dialect.SQLite {
		if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
			return 0, 0, err
		}
		t0 := time.Now()
		res, err := conn.ExecContext(ctx, q)
		el := time.Since(t0)
		if err != nil {
			conn.ExecContext(context.Background(), "ROLLBACK") //nolint:errcheck
			return 0, 0, err
		}
		n, _ := res.RowsAffected()
		_, err = conn.ExecContext(ctx, "COMMIT")
		return el, n, err
	}
	t0 := time.Now()
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return 0, 0, err
	}
	res, err := tx.ExecContext(ctx, q)
	if err != nil {
		tx.Rollback() //nolint:errcheck
		return 0, 0, err
	}
	n, _ := res.RowsAffected()
	if err := tx.Commit(); err != nil {
		return 0, 0, err
	}
	return time.Since(t0), n, nil
}
