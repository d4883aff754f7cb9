package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/schemastate/schemastate/internal/hooks"
	"github.com/schemastate/schemastate/internal/tool/bench/render"
	"github.com/schemastate/schemastate/internal/tool/gen"
	"github.com/schemastate/schemastate/reconcile"
)

// errStopBackfill is returned from the backfill's first failpoint to leave a
// store with the amended table and no backfilled rows (the floor's start).
var errStopBackfill = errors.New("bench: backfill stopped before its INSERT")

// The backfill's floor is its algorithm with nothing extra, written here
// and sharing no SQL with backfill/: one scan of the messages through the
// same plain text pre-filter (a message whose metadata neither holds
// 'subagent_task' nor a \u00 escape that could spell one of its letters is
// never parsed) into a temp table of the per-key winners (the newest message
// of each session and tool call), the MAX over those winners, and one
// INSERT … SELECT from them. What it leaves out is what the generated store
// does not need: the guard and the key writes, the defensive JSON reading
// (every field read once with json_extract or ->>, first member wins, no
// type checks), timestamp normalization (the store's created_at is
// uniform text) and the count of unreadable created_at values.
const floorColumns = `id, task_session_id, task_id, turn_id, agent_execution_id, tool_call_id,
	parent_tool_call_id, subagent_type, description, agent_id, child_session_id, model,
	agent_status, tool_status, is_async, total_tokens, tool_use_count, duration_ms, source,
	observed_at, settled_at, updated_at`

// floorWinners is the floor's temp table.
const floorWinners = "bench_floor_winners"

// floorBackfillSQL returns the floor's statements, in order: the scan into
// the winners, the MAX, the INSERT, the drop.
func floorBackfillSQL(j floorJSON) (winners, max, insert, drop string) {
	get, num, flag, where, from := j.get, j.num, j.flag, j.where, j.from
	temp := "CREATE TEMP TABLE " + floorWinners + " AS"
	path := func(f string, p ...string) string { return fmt.Sprintf(f, strings.Join(p, j.pathSep)) }
	st := func(f, field string) string { return path(f, "normalized", "subagent_task", field) }
	winners = temp + `
SELECT * FROM (
	SELECT m.id AS message_id, m.task_session_id, m.task_id, m.turn_id, ` + path(get, "tool_call_id") + ` AS tool_call_id,
		` + path(get, "parent_tool_call_id") + ` AS parent_tool_call_id, ` + st(get, "subagent_type") + ` AS subagent_type,
		` + st(get, "description") + ` AS description, ` + st(get, "agent_id") + ` AS agent_id,
		` + st(get, "child_session_id") + ` AS child_session_id, ` + st(get, "model") + ` AS model,
		` + st(get, "status") + ` AS agent_status, ` + path(get, "status") + ` AS tool_status, ` + st(flag, "is_async") + ` AS is_async,
		` + st(num, "total_tokens") + ` AS total_tokens, ` + st(num, "tool_use_count") + ` AS tool_use_count, ` + st(num, "duration_ms") + ` AS duration_ms,
		m.created_at, m.updated_at,
		ROW_NUMBER() OVER (PARTITION BY m.task_session_id, ` + path(get, "tool_call_id") + ` ORDER BY m.created_at DESC, m.id DESC) AS rn
	FROM ` + from + `
	WHERE ` + where + `
) ranked WHERE rn = 1`
	max = "SELECT MAX(created_at) FROM " + floorWinners
	insert = `INSERT INTO task_session_subagents (` + floorColumns + `)
SELECT message_id, task_session_id, task_id, turn_id, 'unknown', tool_call_id,
	parent_tool_call_id, subagent_type, description, agent_id, child_session_id, model,
	agent_status, tool_status, is_async, total_tokens, tool_use_count, duration_ms, 'backfill',
	created_at, CASE WHEN tool_status IN ('complete', 'completed', 'success', 'error', 'failed', 'cancelled') THEN updated_at END, updated_at
FROM ` + floorWinners
	drop = "DROP TABLE " + floorWinners
	return winners, max, insert, drop
}

// backfill measures the reconciler's backfill step on the predating store
// of about n messages (the step's own Duration) against the bare
// INSERT … SELECT of the same rows into the same freshly created table.
// Both start from the history alone; the floor's table is created by a
// reconcile stopped at the backfill's first failpoint.
func (b *bench) backfill(ctx context.Context, rep *render.Report, n int, sum *gen.Summary) error {
	m := render.Measurement{Name: render.Backfill, Family: render.FamilyMessages, N: n, Messages: sum.Messages, Target: 1.0,
		OursIs:  "the backfill step of reconcile.Reconcile on the predating store (its own Duration: the one scan into the winners table, the MAX, the INSERT, the keys)",
		FloorIs: "the same algorithm with nothing extra, in the step's transaction shape: one scan through the same text pre-filter into a temp table of the per-key winners (ROW_NUMBER), the MAX over them, one INSERT … SELECT from them (no guard, key writes, defensive JSON reading, timestamp normalization or unreadable count)"}
	r := &backfillRuns{sampledRuns: sampledRuns{b: b, ctx: ctx, n: n}}
	var anchors []anchorRun
	if b.cfg.Exe != "" {
		anchors = append(anchors, anchorRun{render.AnchorCLI, "`schemastate reconcile --db …` on the predating store as a child process, wall time (process start, the whole boot: table created, execution_since, the backfill)", func(int) (time.Duration, error) {
			if err := b.restorePredating(ctx); err != nil {
				return 0, err
			}
			if err := b.checkpoint(ctx); err != nil {
				return 0, err
			}
			return b.cli("reconcile", "--db", b.dsn)
		}})
	}
	if err := b.measure(&m, b.cfg.runsAt(n), r.ours, r.floor, anchors...); err != nil {
		return err
	}
	r.keepMemory(rep)
	m.Rows = int(r.rows)
	m.Detail = fmt.Sprintf("%d rows; the scan into the winners table and the MAX %s median, the INSERT from the winners %s median, the rest is the guard, key writes and transaction; the whole boot in process (table created, execution_since, backfill, COMMIT) %s median",
		r.rows, median(r.scans).Round(time.Microsecond), median(r.inserts).Round(time.Microsecond), median(r.boots).Round(time.Microsecond))
	rep.Measurements = append(rep.Measurements, m)
	return nil
}

// backfillRuns are the two sides of the backfill measurement, with the
// parts of ours kept per run and the rows the floor wrote, which ours must
// write too.
type backfillRuns struct {
	sampledRuns
	scans, inserts, boots []time.Duration
	rows                  int64
}

// ours is the backfill step of a reconcile of the predating store.
func (r *backfillRuns) ours(run int) (time.Duration, error) {
	b, ctx := r.b, r.ctx
	if err := b.restorePredating(ctx); err != nil {
		return 0, err
	}
	if err := b.checkpoint(ctx); err != nil {
		return 0, err
	}
	var tMax, tInsert, tScan time.Time
	fp := func(point string) error {
		switch point {
		case hooks.FailpointBackfillMaxTaken:
			tMax = time.Now()
		case hooks.FailpointBackfillInserted:
			tInsert = time.Now()
		}
		return nil
	}
	progress := func(p reconcile.Progress) {
		if p.Step == reconcile.StepBackfill && tScan.IsZero() && strings.HasPrefix(p.Message, "computing") {
			tScan = time.Now()
		}
	}
	el, rep, err := b.sampledReconcile(hooks.With(ctx, hooks.Hooks{Failpoint: fp}), run, &r.mem, render.FamilyMessages, r.n, "reconcile of the predating store (table created, full backfill)",
		reconcile.WithProgress(progress))
	if err != nil {
		return 0, err
	}
	s := rep.Step(reconcile.StepBackfill)
	if s.Status != reconcile.Applied || s.Rows == nil {
		return 0, fmt.Errorf("%w: backfill step %s: %s", errUnexpected, s.Status, s.Detail)
	}
	if *s.Rows != r.rows {
		return 0, fmt.Errorf("%w: backfill wrote %d rows, the floor %d", errUnexpected, *s.Rows, r.rows)
	}
	if !tScan.IsZero() && !tMax.IsZero() && !tInsert.IsZero() {
		r.scans = append(r.scans, tMax.Sub(tScan))
		r.inserts = append(r.inserts, tInsert.Sub(tMax))
	}
	r.boots = append(r.boots, el)
	return s.Duration, nil
}

// floor is the same algorithm by hand, on the store a reconcile stopped at
// the backfill left.
func (r *backfillRuns) floor(int) (time.Duration, error) {
	b, ctx := r.b, r.ctx
	if err := b.restorePredating(ctx); err != nil {
		return 0, err
	}
	stop := func(point string) error {
		if point == hooks.FailpointBackfillMaxTaken {
			return errStopBackfill
		}
		return nil
	}
	rep, _ := reconcile.Reconcile(hooks.With(ctx, hooks.Hooks{Failpoint: stop}), b.db, reconcile.WithLogger(b.quiet))
	if s := rep.Step(reconcile.StepBackfill); s == nil || s.Status != reconcile.Failed {
		return 0, fmt.Errorf("%w: the floor's setup reconcile did not stop at the backfill", errUnexpected)
	}
	if err := b.checkpoint(ctx); err != nil {
		return 0, err
	}
	d, n, err := b.floorInsert(ctx)
	r.rows = n
	return d, err
}

// checkpoint empties SQLite's WAL so a run does not pay for the previous
// run's pages (nothing on PostgreSQL).
func (b *bench) checkpoint(ctx context.Context) error {
	if b.on.checkpoint == "" {
		return nil
	}
	return drainQuery(ctx, b.db, b.on.checkpoint)
}

// floorInsert runs the floor's statements in the transaction shape the
// backfill step has: inside BEGIN IMMEDIATE without its COMMIT on SQLite
// (the reconcile commits all steps at once, outside the step), as its own
// transaction with COMMIT on PostgreSQL. It returns the rows inserted.
func (b *bench) floorInsert(ctx context.Context) (time.Duration, int64, error) {
	conn, err := b.db.Conn(ctx)
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close()
	winners, max, insert, drop := floorBackfillSQL(b.on.floorJSON)
	tBegin := time.Now()
	if _, err := conn.ExecContext(ctx, b.on.floorBegin); err != nil {
		return 0, 0, err
	}
	var n int64
	var el time.Duration
	t0 := time.Now()
	err = func() error {
		if _, err := conn.ExecContext(ctx, winners); err != nil {
			return err
		}
		var newest sql.NullString
		if err := conn.QueryRowContext(ctx, max).Scan(&newest); err != nil {
			return err
		}
		res, err := conn.ExecContext(ctx, insert)
		if err != nil {
			return err
		}
		if n, err = res.RowsAffected(); err != nil {
			return err
		}
		_, err = conn.ExecContext(ctx, drop)
		return err
	}()
	if err != nil {
		conn.ExecContext(context.Background(), "ROLLBACK") //nolint:errcheck
		return 0, 0, err
	}
	if !b.on.floorTimesCommit {
		el = time.Since(t0)
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		return 0, 0, err
	}
	if b.on.floorTimesCommit {
		el = time.Since(tBegin)
	}
	return el, n, nil
}
