package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/schemastate/schemastate/capture"
	"github.com/schemastate/schemastate/internal/instant"
	"github.com/schemastate/schemastate/internal/tool/bench/render"
)

// plainInsert is the floor's statement: one row of the same 22 columns,
// no conflict clause.
const plainInsert = `INSERT INTO task_session_subagents (` + floorColumns + `)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`

// capture measures live capture throughput, from one writer and from
// captureWriters concurrent writers: cfg.Frames frames through
// capture.Writer.Record, each creating a row (an async_launched launch, the
// shape of 75% of real traffic), against the same number of plain
// single-row INSERTs of the same width through the same pool — same DSN,
// same connection settings, one autocommit statement each. Rows written are
// removed after each run, untimed.
func (b *bench) capture(ctx context.Context, rep *render.Report, rowsN int) error {
	sessions, err := b.captureSessions(ctx)
	if err != nil {
		return err
	}
	// The floor prepares its INSERT once, as the fastest plain writer would:
	// Record keeps its upsert prepared too.
	insert, err := b.db.PrepareContext(ctx, b.d.Rebind(plainInsert))
	if err != nil {
		return err
	}
	defer insert.Close()
	w, err := capture.NewWriter(ctx, b.db, b.d, capture.WithLogger(b.quiet))
	if err != nil {
		return err
	}
	defer w.Close()
	cr := &captureRuns{b: b, ctx: ctx, sessions: sessions, n: b.cfg.Frames, insert: insert, w: w}
	n := cr.n
	rate := func(d time.Duration) float64 { return float64(n) / d.Seconds() }

	m := render.Measurement{Name: render.Capture, Family: render.FamilyRows, N: rowsN, Rows: rowsN, Count: n, Target: 1 / 0.9,
		OursIs:  fmt.Sprintf("%d async_launched frames through capture.Writer.Record, each creating a row", n),
		FloorIs: fmt.Sprintf("%d plain single-row INSERTs of the same 22 columns through the same pool, prepared once, one autocommit statement each, ids random UUIDs as Record's are", n)}
	if err := b.measure(&m, b.cfg.runsAt(rowsN), cr.record(1), cr.plain(1)); err != nil {
		return err
	}
	m.Detail = fmt.Sprintf("%.0f frames/s through Record vs %.0f rows/s plain (%.2f× the plain rate; target ≥ 0.90×)",
		rate(m.Ours), rate(m.Floor), rate(m.Ours)/rate(m.Floor))
	rep.Measurements = append(rep.Measurements, m)

	// The same frames from captureWriters concurrent writers sharing one
	// Writer and pool, against as many concurrent writers of the plain
	// INSERTs. On SQLite the writers queue on the file's write lock (busy
	// timeout, then the writer's retries).
	before := w.Counters()
	mc := render.Measurement{Name: render.CaptureConcurrent, Family: render.FamilyRows, N: rowsN, Rows: rowsN, Count: n,
		OursIs:  fmt.Sprintf("the same %d frames through one capture.Writer from %d concurrent writers", n, captureWriters),
		FloorIs: fmt.Sprintf("the same %d plain single-row INSERTs from %d concurrent writers through the same pool", n, captureWriters)}
	if err := b.measure(&mc, b.cfg.runsAt(rowsN), cr.record(captureWriters), cr.plain(captureWriters)); err != nil {
		return err
	}
	after := w.Counters()
	mc.Detail = fmt.Sprintf("%.0f frames/s through Record from %d writers vs %.0f rows/s plain from %d (%.2f× the plain rate); 1 writer: %.0f frames/s; %d of %d frames retried",
		rate(mc.Ours), captureWriters, rate(mc.Floor), captureWriters, rate(mc.Ours)/rate(mc.Floor), rate(m.Ours),
		after.Retried-before.Retried, after.Attempted-before.Attempted)
	rep.Measurements = append(rep.Measurements, mc)
	return nil
}

type captureSession struct{ id, task string }

// captureSessions are up to 64 of the store's sessions, which the frames
// are spread over.
func (b *bench) captureSessions(ctx context.Context) ([]captureSession, error) {
	rows, err := b.db.QueryContext(ctx, `SELECT id, task_id FROM task_sessions ORDER BY id LIMIT 64`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var sessions []captureSession
	for rows.Next() {
		var s captureSession
		if err := rows.Scan(&s.id, &s.task); err != nil {
			return nil, err
		}
		sessions = append(sessions, s)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(sessions) == 0 {
		return nil, fmt.Errorf("%w: no sessions to capture into", errUnexpected)
	}
	return sessions, nil
}

// captureRuns are the two sides of a capture measurement: n frames through
// the Writer, or as plain INSERTs.
type captureRuns struct {
	b        *bench
	ctx      context.Context
	sessions []captureSession
	n        int
	insert   *sql.Stmt
	w        *capture.Writer
}

// frame is frame i of run run.
func (c *captureRuns) frame(run, i int) capture.Frame {
	return captureFrame(c.sessions[i%len(c.sessions)], "turn-bench-", "toolu_bench_", run, i)
}

// captureFrame is frame i of run run in session s: an async_launched
// launch, its turn and tool call ids starting with the prefixes given, by
// which a measurement finds and removes the rows it wrote.
func captureFrame(s captureSession, turnPrefix, toolCallPrefix string, run, i int) capture.Frame {
	return capture.Frame{
		SessionID: s.id, TaskID: s.task, TurnID: fmt.Sprintf("%s%d", turnPrefix, i/3),
		ExecutionID: fmt.Sprintf("00000000-0000-4000-8000-%012d", run), ToolCallID: fmt.Sprintf("%s%d_%d", toolCallPrefix, run, i),
		ToolStatus: "completed", ObservedAt: time.Now(),
		Subagent: capture.SubagentTask{Status: "async_launched", SubagentType: "code-reviewer", Description: "Review the change",
			AgentID: fmt.Sprintf("a%016d", i), Model: "claude-opus-5[1m]", IsAsync: true},
	}
}

func (c *captureRuns) cleanup() error {
	_, err := c.b.db.ExecContext(c.ctx, `DELETE FROM task_session_subagents WHERE tool_call_id LIKE 'toolu_bench_%'`)
	return err
}

// fanOut runs one(i) for every frame i < n on writers goroutines, writer k
// taking frames k, k+writers, …, and returns the wall time.
func fanOut(n, writers int, one func(i int) error) (time.Duration, error) {
	t0 := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, writers)
	for k := 0; k < writers; k++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := k; i < n && errs[k] == nil; i += writers {
				errs[k] = one(i)
			}
		}()
	}
	wg.Wait()
	return time.Since(t0), errors.Join(errs...)
}

// record is ours: every frame through Record, from writers goroutines.
func (c *captureRuns) record(writers int) func(run int) (time.Duration, error) {
	return func(run int) (time.Duration, error) {
		el, err := fanOut(c.n, writers, func(i int) error { return c.w.Record(c.ctx, c.frame(run, i)) })
		if err != nil {
			return 0, err
		}
		return el, c.cleanup()
	}
}

// plain is the floor: the same rows as plain INSERTs, from writers
// goroutines.
func (c *captureRuns) plain(writers int) func(run int) (time.Duration, error) {
	d := c.b.d
	return func(run int) (time.Duration, error) {
		el, err := fanOut(c.n, writers, func(i int) error {
			f := c.frame(run, i)
			now := time.Now()
			// A random (version 4) id, the kind Record writes, so both
			// insert into the primary key at random places.
			_, err := c.insert.ExecContext(c.ctx,
				uuid.NewString(), f.SessionID, f.TaskID, f.TurnID, f.ExecutionID, f.ToolCallID,
				nil, f.Subagent.SubagentType, f.Subagent.Description, f.Subagent.AgentID, nil,
				f.Subagent.Model, f.Subagent.Status, f.ToolStatus, 1, nil, nil,
				nil, "live", instant.RowTime(d, f.ObservedAt), instant.RowTime(d, f.ObservedAt), instant.RowTime(d, now))
			return err
		})
		if err != nil {
			return 0, err
		}
		return el, c.cleanup()
	}
}

// captureWriters is how many concurrent writers CaptureConcurrent uses.
const captureWriters = 8
