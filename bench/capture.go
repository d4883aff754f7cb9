package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/schemastate/schemastate/capture"
	"github.com/schemastate/schemastate/keys"
)

// plainInsert is the floor's statement: one row of the same 22 columns,
// no conflict clause.
const plainInsert = `INSERT INTO task_session_subagents (` + floorColumns + `)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`

// capture measures live capture throughput: cfg.Frames frames through
// capture.Writer.Record, each creating a row (an async_launched launch, the
// shape of 75% of real traffic), against the same number of plain
// single-row INSERTs of the same width through the same pool — same DSN,
// same connection settings, one autocommit statement each. Rows written are
// removed after each run, untimed.
func (b *bench) capture(ctx context.Context, rep *Report, rowsN int) error {
	type sess struct{ id, task string }
	var sessions []sess
	rows, err := b.db.QueryContext(ctx, `SELECT id, task_id FROM task_sessions ORDER BY id LIMIT 64`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var s sess
		if err := rows.Scan(&s.id, &s.task); err != nil {
			rows.Close()
			return err
		}
		sessions = append(sessions, s)
	}
	rows.Close()
	if len(sessions) == 0 {
		return fmt.Errorf("%w: no sessions to capture into", errUnexpected)
	}
	n := b.cfg.Frames
	cleanup := func() error {
		_, err := b.db.ExecContext(ctx, `DELETE FROM task_session_subagents WHERE tool_call_id LIKE 'toolu_bench_%'`)
		return err
	}
	frame := func(run, i int) capture.Frame {
		s := sessions[i%len(sessions)]
		return capture.Frame{
			SessionID: s.id, TaskID: s.task, TurnID: fmt.Sprintf("turn-bench-%d", i/3),
			ExecutionID: fmt.Sprintf("00000000-0000-4000-8000-%012d", run), ToolCallID: fmt.Sprintf("toolu_bench_%d_%d", run, i),
			ToolStatus: "completed", ObservedAt: time.Now(),
			Subagent: capture.SubagentTask{Status: "async_launched", SubagentType: "code-reviewer", Description: "Review the change",
				AgentID: fmt.Sprintf("a%016d", i), Model: "claude-opus-5[1m]", IsAsync: true},
		}
	}
	insert := b.d.Rebind(plainInsert)
	w := capture.NewWriter(b.db, b.d, capture.WithLogger(b.quiet))
	m := Measurement{Name: Capture, Family: FamilyRows, N: rowsN, Rows: rowsN, Count: n, Target: 1 / 0.9,
		OursIs:  fmt.Sprintf("%d async_launched frames through capture.Writer.Record, each creating a row", n),
		FloorIs: fmt.Sprintf("%d plain single-row INSERTs of the same 22 columns through the same pool, one autocommit statement each", n)}
	err = b.measure(&m, b.cfg.runsAt(rowsN),
		func(run int) (time.Duration, error) {
			t0 := time.Now()
			for i := 0; i < n; i++ {
				if err := w.Record(ctx, frame(run, i)); err != nil {
					return 0, err
				}
			}
			el := time.Since(t0)
			return el, cleanup()
		},
		func(run int) (time.Duration, error) {
			t0 := time.Now()
			for i := 0; i < n; i++ {
				f := frame(run, i)
				now := time.Now()
				_, err := b.db.ExecContext(ctx, insert,
					fmt.Sprintf("bench-%d-%d", run, i), f.SessionID, f.TaskID, f.TurnID, f.ExecutionID, f.ToolCallID,
					nil, f.Subagent.SubagentType, f.Subagent.Description, f.Subagent.AgentID, nil,
					f.Subagent.Model, f.Subagent.Status, f.ToolStatus, 1, nil, nil,
					nil, "live", keys.RowTime(b.d, f.ObservedAt), keys.RowTime(b.d, f.ObservedAt), keys.RowTime(b.d, now))
				if err != nil {
					return 0, err
				}
			}
			el := time.Since(t0)
			return el, cleanup()
		})
	if err != nil {
		return err
	}
	rate := func(d time.Duration) float64 { return float64(n) / d.Seconds() }
	m.Detail = fmt.Sprintf("%.0f frames/s through Record vs %.0f rows/s plain (%.2f× the plain rate; target ≥ 0.90×)",
		rate(m.Ours), rate(m.Floor), rate(m.Ours)/rate(m.Floor))
	rep.Measurements = append(rep.Measurements, m)
	return nil
}
