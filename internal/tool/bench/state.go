package bench

import (
	"context"
	"fmt"
	"strings"

	"github.com/schemastate/schemastate/internal/tool/fixtures"
	"github.com/schemastate/schemastate/keys"
)

// The generated legacy rows are kept aside so every destructive run starts
// from the same state. The measured operations write only
// task_session_subagents and kandev_meta; the history (sessions, turns,
// messages) is never written after generation, so restoring those two is
// restoring the whole store.
const (
	// baseTable holds the rows the generator wrote.
	baseTable = "schemastate_bench_base_rows"
	// snapshotTable holds the legacy rows of the size being measured.
	snapshotTable = "schemastate_bench_legacy_rows"
)

// keepBase copies the generated rows aside and makes them the snapshot.
func (b *bench) keepBase(ctx context.Context) error {
	for _, q := range []string{
		"DROP TABLE IF EXISTS " + baseTable,
		"CREATE TABLE " + baseTable + " AS SELECT * FROM task_session_subagents",
		"DROP TABLE IF EXISTS " + snapshotTable,
		"CREATE TABLE " + snapshotTable + " AS SELECT * FROM task_session_subagents",
	} {
		if _, err := b.db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("bench: keep the generated rows: %w", err)
		}
	}
	return nil
}

// fill makes the snapshot n rows: the generated rows, then copies of them
// whose id and tool_call_id carry the copy's number (same sessions, same
// values otherwise), in that order.
func (b *bench) fill(ctx context.Context, n int) error {
	var base int
	if err := b.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+baseTable).Scan(&base); err != nil {
		return err
	}
	if base == 0 {
		return fmt.Errorf("%w: no generated rows to replicate", errUnexpected)
	}
	copies := (n + base - 1) / base
	exprs := make([]string, len(b.legacyColumns))
	for i, c := range b.legacyColumns {
		exprs[i] = "r." + c
		if c == "id" || c == "tool_call_id" {
			exprs[i] = fmt.Sprintf("CASE WHEN k.i = 0 THEN r.%[1]s ELSE r.%[1]s || '~' || CAST(k.i AS TEXT) END", c)
		}
	}
	series := b.on.series
	cols := strings.Join(b.legacyColumns, ", ")
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{"DROP TABLE IF EXISTS " + snapshotTable, nil},
		{"CREATE TABLE " + snapshotTable + " AS SELECT * FROM " + baseTable + " WHERE 1 = 0", nil},
		{"INSERT INTO " + snapshotTable + " (" + cols + ") SELECT " + strings.Join(exprs, ", ") + " FROM " + baseTable + " r CROSS JOIN " + series +
			" ORDER BY k.i, r.id LIMIT " + fmt.Sprint(n), []any{copies}},
	} {
		if _, err := b.db.ExecContext(ctx, q.sql, q.args...); err != nil {
			return fmt.Errorf("bench: fill %d rows: %w", n, err)
		}
	}
	return nil
}

// restoreLegacy puts back the pre-amendment table with the snapshot's rows
// and the pre-amendment keys (installed-base states 3 and 4).
func (b *bench) restoreLegacy(ctx context.Context) error {
	if err := b.restorePredating(ctx); err != nil {
		return err
	}
	legacy, err := fixtures.LegacyFixture(string(b.d))
	if err != nil {
		return err
	}
	if err := fixtures.ApplyScript(ctx, b.db, legacy); err != nil {
		return err
	}
	cols := strings.Join(b.legacyColumns, ", ")
	if _, err := b.db.ExecContext(ctx, "INSERT INTO task_session_subagents ("+cols+") SELECT "+cols+" FROM "+snapshotTable); err != nil {
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
	return b.settle(ctx)
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

// settle leaves the restored store as a running host's would be: on
// PostgreSQL the table analyzed (as autovacuum would have), on SQLite the
// WAL checkpointed so no run pays for the previous one's pages.
func (b *bench) settle(ctx context.Context) error {
	return drainQuery(ctx, b.db, b.on.settle)
}
