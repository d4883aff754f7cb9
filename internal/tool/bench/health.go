package bench

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/health"
	"github.com/schemastate/schemastate/internal/instant"
	"github.com/schemastate/schemastate/internal/readonly"
	"github.com/schemastate/schemastate/internal/tool/bench/render"
	"github.com/schemastate/schemastate/keys"
)

// The health floor: the same four numbers from the same data, written for
// the floor and sharing no SQL with the health package. One scan of the
// messages in the window through the same plain text pre-filter, the JSON
// read only for those candidates and only as far as this store needs (its
// candidates are all valid JSON, so PostgreSQL casts them directly — inside
// a CASE, the only way to keep the planner from casting a row before the
// pre-filter has rejected it), both
// directed EXCEPTs, the collision count and the scoped MAX, in one read
// transaction like ours. The window is compared the cheapest way that is
// right for this store: on SQLite every timestamp is the host's UTC text
// form (fraction trimmed, "+00:00"), which sorts as the instant, so the
// boundary is bound in that form and compared as text. The unary + keeps
// SQLite from reading the window through the created_at index (random reads
// of the table, slower than the one sequential scan the floor is), and
// MATERIALIZED keeps it from scanning once per EXCEPT that reads m
// (PostgreSQL materializes a CTE read twice by itself).
const (
	healthFloorSQLite = `WITH m AS MATERIALIZED (
  SELECT task_session_id AS s, task_id, json_extract(metadata, '$.tool_call_id') AS t
  FROM task_session_messages
  WHERE (instr(metadata, 'subagent_task') > 0 OR (instr(metadata, '\u00') > 0 AND metadata GLOB '*\u00[5-7]*'))
    AND +created_at >= ?1
    AND CASE WHEN json_valid(metadata) THEN json_extract(metadata, '$.normalized.kind') END = 'subagent_task'
), r AS (
  SELECT task_session_id AS s, tool_call_id AS t, observed_at FROM task_session_subagents WHERE observed_at >= ?1
)
SELECT
  (SELECT COUNT(*) FROM (SELECT s, t FROM m WHERE s <> '' AND task_id <> '' AND t <> '' EXCEPT SELECT s, t FROM r)),
  (SELECT COUNT(*) FROM (SELECT s, t FROM r EXCEPT SELECT s, t FROM m)),
  (SELECT COUNT(*) - COUNT(DISTINCT s || ':' || t) FROM r),
  (SELECT MAX(observed_at) FROM r)`
	healthFloorPostgres = `WITH m AS (
  SELECT task_session_id AS s, task_id, CASE WHEN jsonb_typeof(j -> 'tool_call_id') = 'string' THEN j ->> 'tool_call_id' END AS t
  FROM (
    SELECT task_session_id, task_id,
      CASE WHEN strpos(metadata, 'subagent_task') > 0 OR (strpos(metadata, '\u00') > 0 AND metadata ~ '\\u00[5-7]') THEN metadata::jsonb END AS j
    FROM task_session_messages
    WHERE (strpos(metadata, 'subagent_task') > 0 OR (strpos(metadata, '\u00') > 0 AND metadata ~ '\\u00[5-7]'))
      AND created_at >= $1::timestamp
  ) c
  WHERE j #>> '{normalized,kind}' = 'subagent_task'
), r AS (
  SELECT task_session_id AS s, tool_call_id AS t, observed_at FROM task_session_subagents WHERE observed_at >= $1::timestamp
)
SELECT
  (SELECT COUNT(*) FROM (SELECT s, t FROM m WHERE s <> '' AND task_id <> '' AND t <> '' EXCEPT SELECT s, t FROM r) a),
  (SELECT COUNT(*) FROM (SELECT s, t FROM r EXCEPT SELECT s, t FROM m) b),
  (SELECT COUNT(*) - COUNT(DISTINCT (s, t)) FROM r),
  (SELECT MAX(observed_at)::text FROM r)`
)

// healthCounts are the numbers both sides compute.
type healthCounts struct{ shortfall, excess, collisions int64 }

// health measures health.Evaluate against the independent scan on the store
// reconciled from legacy (capture_since in the middle of the history), and
// checks that both give the same shortfall, excess and collisions.
func (b *bench) health(ctx context.Context, rep *render.Report, n, messages int) error {
	ks, err := keys.Read(ctx, b.db, b.d)
	if err != nil {
		return err
	}
	if ks.CaptureSince == nil {
		return fmt.Errorf("%w: no capture_since for the health window", errUnexpected)
	}
	q, arg, err := healthFloorQuery(b.d, *ks.CaptureSince)
	if err != nil {
		return err
	}
	m := render.Measurement{Name: render.Health, Family: render.FamilyMessages, N: n, Messages: messages, Target: 1.2,
		OursIs:  "health.Evaluate, in process, wall time (read transaction, key read, table checks, the one statement)",
		FloorIs: "an independent statement for the same four numbers in one read transaction: one scan of the window's messages through the same text pre-filter, JSON read only for candidates, two directed EXCEPTs, the collision count, the scoped MAX"}
	var ours, floor healthCounts
	var verdict health.Verdict
	if err := b.measure(&m, b.cfg.runsAt(n),
		func(int) (time.Duration, error) {
			t0 := time.Now()
			r, err := health.Evaluate(ctx, b.db)
			if err != nil {
				return 0, err
			}
			el := time.Since(t0)
			verdict = r.Verdict
			ours = healthCounts{*r.Shortfall, *r.Excess, *r.Collisions}
			return el, nil
		},
		func(int) (time.Duration, error) {
			t0 := time.Now()
			c, err := b.healthFloor(ctx, q, arg)
			floor = c
			return time.Since(t0), err
		},
		b.cliAnchor("`schemastate health --db …` as a child process, wall time", "health", "--db", b.dsn)...); err != nil {
		return err
	}
	if ours != floor {
		return fmt.Errorf("%w: health.Evaluate gave %+v, the independent scan %+v", errUnexpected, ours, floor)
	}
	m.Rows, err = b.count(ctx, "task_session_subagents")
	if err != nil {
		return err
	}
	m.Detail = fmt.Sprintf("verdict %s; shortfall %d, excess %d, collisions %d — the same from both sides; window since capture_since=%s",
		verdict, ours.shortfall, ours.excess, ours.collisions, *ks.CaptureSince)
	rep.Measurements = append(rep.Measurements, m)
	return nil
}

// healthFloorQuery is the floor's statement for dialect d and its one bind
// value, the capture_since boundary in the form the statement compares.
func healthFloorQuery(d dialect.Dialect, captureSince string) (string, any, error) {
	on, err := dialects.For(d)
	if err != nil {
		return "", nil, fmt.Errorf("bench: %w", err)
	}
	bound, err := instant.NewBoundary(captureSince)
	if err != nil {
		return "", nil, err
	}
	q, arg := on.healthFloor(bound)
	return q, arg, nil
}

func (b *bench) healthFloor(ctx context.Context, q string, arg any) (healthCounts, error) {
	tx, err := readonly.Begin(ctx, b.db, b.d)
	if err != nil {
		return healthCounts{}, err
	}
	defer tx.Rollback() //nolint:errcheck
	var c healthCounts
	var last sql.NullString
	if err := tx.QueryRowContext(ctx, q, arg).Scan(&c.shortfall, &c.excess, &c.collisions, &last); err != nil {
		return c, err
	}
	return c, tx.Commit()
}

// cliAnchor is the CLI run of args as an anchor, or none without a binary.
func (b *bench) cliAnchor(is string, args ...string) []anchorRun {
	if b.cfg.Exe == "" {
		return nil
	}
	return []anchorRun{{render.AnchorCLI, is, func(int) (time.Duration, error) { return b.cli(args...) }}}
}
