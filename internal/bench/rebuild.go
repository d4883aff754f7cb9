package bench

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/schemastate/schemastate/dialect"
)

// The hand-written migrations: exactly the end state the declaration asks
// for, written by someone who knows the starting shape.
const (
	amendedSQLite = `CREATE TABLE schemastate_bench_new (
	id TEXT NOT NULL PRIMARY KEY,
	task_session_id TEXT NOT NULL REFERENCES task_sessions (id) ON DELETE CASCADE,
	task_id TEXT NOT NULL,
	turn_id TEXT,
	agent_execution_id TEXT NOT NULL DEFAULT 'unknown',
	tool_call_id TEXT NOT NULL,
	parent_tool_call_id TEXT,
	subagent_type TEXT,
	description TEXT,
	agent_id TEXT,
	child_session_id TEXT,
	model TEXT,
	agent_status TEXT,
	tool_status TEXT,
	is_async INTEGER NOT NULL DEFAULT 0,
	total_tokens INTEGER,
	tool_use_count INTEGER,
	duration_ms INTEGER,
	source TEXT NOT NULL DEFAULT 'live',
	observed_at TIMESTAMP NOT NULL,
	settled_at TIMESTAMP,
	updated_at TIMESTAMP NOT NULL
)`
	amendedIndexes = `CREATE UNIQUE INDEX task_session_subagents_session_execution_tool_call_key ON task_session_subagents (task_session_id, agent_execution_id, tool_call_id);
CREATE INDEX idx_subagents_session_id ON task_session_subagents (task_session_id);
CREATE INDEX idx_subagents_task_id ON task_session_subagents (task_id);
CREATE INDEX idx_subagents_turn_id ON task_session_subagents (turn_id)`
)

// handRebuildSQLite copies the pre-amendment table's columns (legacy) into
// the amended table.
func handRebuildSQLite(legacy []string) []string {
	cols := strings.Join(legacy, ", ")
	return append([]string{
		amendedSQLite,
		"INSERT INTO schemastate_bench_new (" + cols + ") SELECT " + cols + " FROM task_session_subagents",
		"DROP TABLE task_session_subagents",
		"ALTER TABLE schemastate_bench_new RENAME TO task_session_subagents",
	}, strings.Split(amendedIndexes, ";\n")...)
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
	if err := execAll(ctx, tx, handRebuildSQLite(b.legacyColumns)); err != nil {
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
