package bench

import (
	"context"
	"fmt"

	"github.com/schemastate/schemastate"
	"github.com/schemastate/schemastate/keys"
)

// The generated legacy table and keys are kept aside so every destructive
// run starts from the same state. The measured operations write only
// task_session_subagents and kandev_meta; the history (sessions, turns,
// messages) is never written after generation, so restoring those two is
// restoring the whole store.
const snapshotTable = "schemastate_bench_legacy_rows"

func (b *bench) snapshot(ctx context.Context) error {
	if _, err := b.db.ExecContext(ctx, "CREATE TABLE "+snapshotTable+" AS SELECT * FROM task_session_subagents"); err != nil {
		return fmt.Errorf("bench: snapshot legacy rows: %w", err)
	}
	var err error
	b.keys, err = keys.Read(ctx, b.db, b.d)
	return err
}

func (b *bench) dropSnapshot() {
	_, _ = b.db.ExecContext(context.Background(), "DROP TABLE IF EXISTS "+snapshotTable)
}

// restoreLegacy puts back the pre-amendment table with its generated rows
// and the pre-amendment keys (installed-base states 3 and 4).
func (b *bench) restoreLegacy(ctx context.Context) error {
	if err := b.restorePredating(ctx); err != nil {
		return err
	}
	legacy, err := schemastate.LegacyFixture(string(b.d))
	if err != nil {
		return err
	}
	if err := schemastate.ApplyScript(ctx, b.db, legacy); err != nil {
		return err
	}
	if _, err := b.db.ExecContext(ctx, "INSERT INTO task_session_subagents SELECT * FROM "+snapshotTable); err != nil {
		return fmt.Errorf("bench: restore legacy rows: %w", err)
	}
	for k, v := range map[string]*string{keys.CaptureSince: b.keys.CaptureSince, keys.BackfillThrough: b.keys.BackfillThrough, keys.ExecutionSince: b.keys.ExecutionSince} {
		if v == nil {
			continue
		}
		if _, err := keys.WriteOnce(ctx, b.db, b.d, k, *v); err != nil {
			return err
		}
	}
	return b.analyze(ctx)
}

// restorePredating removes the table and the three keys: the history alone
// (installed-base state 2).
func (b *bench) restorePredating(ctx context.Context) error {
	if _, err := b.db.ExecContext(ctx, "DROP TABLE IF EXISTS task_session_subagents"); err != nil {
		return fmt.Errorf("bench: drop task_session_subagents: %w", err)
	}
	_, err := b.db.ExecContext(ctx, b.d.Rebind("DELETE FROM kandev_meta WHERE key IN (?, ?, ?)"),
		keys.CaptureSince, keys.BackfillThrough, keys.ExecutionSince)
	return err
}

// analyze refreshes PostgreSQL's statistics for the restored table, as
// autovacuum would have on a running host.
func (b *bench) analyze(ctx context.Context) error {
	if b.d != "postgres" {
		return nil
	}
	_, err := b.db.ExecContext(ctx, "ANALYZE task_session_subagents")
	return err
}
