package bench

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/tool/fixtures"
)

// The hand-written migrations: exactly the end state the declaration asks
// for, written by someone who knows the starting shape.

// amendedKey is the declared unique index over the amended key, which the
// declaration names and the host's inline UNIQUE leaves unnamed.
const amendedKey = "CREATE UNIQUE INDEX task_session_subagents_session_execution_tool_call_key ON task_session_subagents (task_session_id, agent_execution_id, tool_call_id)"

// handRebuildSQLite creates the amended table as the host's own DDL writes
// it (fixtures.HostAmendedFixture) brought to the declared shape — a NOT
// NULL primary key, the key as the declared unique index instead of an
// inline UNIQUE — under a new name, copies the pre-amendment table's columns
// (legacy) into it, drops the old table, renames the new one into place and
// creates the key and the host's three indexes.
func handRebuildSQLite(legacy []string) ([]string, error) {
	script, err := fixtures.HostAmendedFixture(string(dialect.SQLite))
	if err != nil {
		return nil, err
	}
	var create string
	var indexes []string
	for _, s := range fixtures.SplitSQL(script) {
		switch {
		case strings.HasPrefix(s, "CREATE TABLE"):
			create = s
		case strings.HasPrefix(s, "CREATE INDEX"):
			indexes = append(indexes, s)
		}
	}
	create, err = fixtures.Rewrite(create,
		"CREATE TABLE IF NOT EXISTS task_session_subagents (", "CREATE TABLE schemastate_bench_new (",
		"    id TEXT PRIMARY KEY,", "    id TEXT NOT NULL PRIMARY KEY,",
		",\n    UNIQUE (task_session_id, agent_execution_id, tool_call_id)", "")
	if err != nil {
		return nil, fmt.Errorf("bench: the hand-written rebuild: %w", err)
	}
	cols := strings.Join(legacy, ", ")
	return append([]string{
		create,
		"INSERT INTO schemastate_bench_new (" + cols + ") SELECT " + cols + " FROM task_session_subagents",
		"DROP TABLE task_session_subagents",
		"ALTER TABLE schemastate_bench_new RENAME TO task_session_subagents",
		amendedKey,
	}, indexes...), nil
}

var handSwapPostgres = []string{
	`ALTER TABLE task_session_subagents
	DROP CONSTRAINT task_session_subagents_task_session_id_tool_call_id_key,
	ALTER COLUMN total_tokens TYPE bigint,
	ALTER COLUMN tool_use_count TYPE bigint,
	ALTER COLUMN duration_ms TYPE bigint,
	ADD COLUMN agent_execution_id text NOT NULL DEFAULT 'unknown',
	ADD CONSTRAINT task_session_subagents_session_execution_tool_call_key UNIQUE (task_session_id, agent_execution_id, tool_call_id)`,
}

// handMigration runs stmts on one connection as one transaction, timed from
// before the transaction to after its COMMIT. On SQLite foreign keys are
// switched off first (inside the timing: ours pays for it too) and the
// transaction is BEGIN IMMEDIATE, the reconcile's lock.
func (b *bench) handMigration(ctx context.Context, stmts []string) (time.Duration, error) {
	conn, err := b.db.Conn(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	t0 := time.Now()
	if err := b.on.handMigration(ctx, conn, stmts); err != nil {
		return 0, err
	}
	return time.Since(t0), nil
}

const hostIs = "SQLite's documented 12-step procedure as a host writes it by hand (recreateTableNamed): foreign keys off, BeginTx, read the table's index and trigger SQL from sqlite_master, create / copy / drop / rename, the four CREATE INDEX, PRAGMA foreign_key_check over the database, COMMIT, foreign keys on"

// hostRecreate is the host's own recreate-table migration: SQLite's
// documented procedure ("Making Other Kinds Of Table Schema Changes"), as a
// Go host writes it with database/sql — the transaction from BeginTx (the
// host's DSN makes it BEGIN IMMEDIATE), the whole-database
// foreign_key_check the procedure's step 10 asks for, and no row count.
func (b *bench) hostRecreate(ctx context.Context) (time.Duration, error) {
	stmts, err := handRebuildSQLite(b.legacyColumns) // written before the clock starts
	if err != nil {
		return 0, err
	}
	conn, err := b.db.Conn(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	t0 := time.Now()
	if _, err := conn.ExecContext(ctx, "PRAGMA foreign_keys = OFF"); err != nil {
		return 0, err
	}
	defer conn.ExecContext(context.Background(), "PRAGMA foreign_keys = ON") //nolint:errcheck
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback() //nolint:errcheck
	if err := drainQuery(ctx, tx, `SELECT type, sql FROM sqlite_master WHERE tbl_name = 'task_session_subagents' AND type IN ('index', 'trigger') AND sql IS NOT NULL`); err != nil {
		return 0, err
	}
	if err := execAll(ctx, tx, stmts); err != nil {
		return 0, err
	}
	rows, err := tx.QueryContext(ctx, "PRAGMA foreign_key_check")
	if err != nil {
		return 0, err
	}
	violations := 0
	for rows.Next() {
		violations++
	}
	rows.Close()
	if violations > 0 {
		return 0, fmt.Errorf("%w: foreign_key_check found %d violations", errUnexpected, violations)
	}
	if err := tx.Commit(); err != nil {
		return 0, err
	}
	return time.Since(t0), nil
}

// tableBytes is the size of task_session_subagents with its indexes: the
// pages SQLite's dbstat counts for them, or PostgreSQL's
// pg_total_relation_size.
func (b *bench) tableBytes(ctx context.Context) (int64, error) {
	var n int64
	if err := b.db.QueryRowContext(ctx, b.on.tableBytes).Scan(&n); err != nil {
		return 0, fmt.Errorf("bench: size of task_session_subagents: %w", err)
	}
	return n, nil
}

func drainQuery(ctx context.Context, q dialect.Querier, query string, args ...any) error {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
	}
	return rows.Err()
}

func execAll(ctx context.Context, q dialect.Querier, stmts []string) error {
	for _, s := range stmts {
		if _, err := q.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("%.50s…: %w", s, err)
		}
	}
	return nil
}
