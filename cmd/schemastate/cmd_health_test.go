package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/instant"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/keys"
)

// healthStore is a reconciled database with session s1 (of task-1) and
// kandev_meta emptied, seeded by plain SQL.
func healthStore(t *testing.T, db *dbtest.DB) func(q string, args ...any) {
	t.Helper()
	sessionStore(t, db, map[string]string{"s1": "task-1"})
	exec := func(q string, args ...any) {
		t.Helper()
		_, err := db.DB.Exec(db.Q(q), args...)
		require.NoError(t, err, q)
	}
	exec(`DELETE FROM kandev_meta`)
	return exec
}

var healthK = time.Date(2026, 7, 30, 12, 0, 0, 500000000, time.UTC)

func seedMessage(t *testing.T, db *dbtest.DB, exec func(string, ...any), id, toolCallID string, at time.Time) {
	t.Helper()
	ts := instant.RowTime(db.Dialect, at)
	exec(`INSERT INTO task_session_messages (id, task_session_id, task_id, turn_id, content, metadata, created_at, updated_at) VALUES (?, 's1', 'task-1', 't', '…', ?, ?, ?)`,
		id, `{"tool_call_id":"`+toolCallID+`","normalized":{"kind":"subagent_task","subagent_task":{"status":"completed"}}}`, ts, ts)
}

func seedRow(t *testing.T, db *dbtest.DB, exec func(string, ...any), id, toolCallID string, at time.Time) {
	t.Helper()
	ts := instant.RowTime(db.Dialect, at)
	exec(`INSERT INTO task_session_subagents (id, task_session_id, task_id, agent_execution_id, tool_call_id, observed_at, updated_at) VALUES (?, 's1', 'task-1', 'exec-1', ?, ?, ?)`,
		id, toolCallID, ts, ts)
}

// The JSON object's shape, verdicts and exit codes of `schemastate health`:
// 0 only for healthy, 1 for every other verdict, with null counts when the
// comparison was not run (AC-28a) and a null last_observed_at read as
// nothing_since_activation (AC-29).
func TestCLI_Health_AC28_AC28a_AC29_VerdictsAndExitCodes(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		exec := healthStore(t, db)
		since := instant.Format(healthK)
		// requireJSON runs health --json and requires its exit code and object.
		requireJSON := func(wantCode int, want map[string]any) {
			t.Helper()
			code, out, stderr := healthCLI(t, "--db", db.CLIDSN, "--json")
			require.Equal(t, wantCode, code, stderr)
			var m map[string]any
			decodeJSON(t, out, &m, out)
			require.Equal(t, want, m)
		}
		// requireText runs health and requires its exit code and lines.
		requireText := func(wantCode int, lines ...string) {
			t.Helper()
			code, out, _ := healthCLI(t, "--db", db.CLIDSN)
			require.Equal(t, wantCode, code)
			for _, l := range lines {
				require.Contains(t, out, l)
			}
		}

		requireJSON(exitUnhealthy, map[string]any{"capture_since": nil, "verdict": "not_activated", "shortfall": nil,
			"excess": nil, "collisions": nil, "last_observed_at": nil, "unreadable_created_at": nil})

		exec(`INSERT INTO kandev_meta (key, value) VALUES (?, ?)`, keys.CaptureSince, since)
		seedMessage(t, db, exec, "m-old", "tc-old", healthK.Add(-time.Hour))
		seedRow(t, db, exec, "r-old", "tc-old", healthK.Add(-time.Hour))
		requireJSON(exitUnhealthy, map[string]any{"capture_since": since, "verdict": "nothing_since_activation", "shortfall": 0.0,
			"excess": 0.0, "collisions": 0.0, "last_observed_at": nil, "unreadable_created_at": 0.0})

		seedMessage(t, db, exec, "m-a", "tc-a", healthK)
		seedRow(t, db, exec, "r-a", "tc-a", healthK)
		seedRow(t, db, exec, "r-orphan", "tc-orphan", healthK.Add(time.Second))
		requireJSON(exitOK, map[string]any{"capture_since": since, "verdict": "healthy", "shortfall": 0.0,
			"excess": 1.0, "collisions": 0.0, "last_observed_at": instant.Format(healthK.Add(time.Second)), "unreadable_created_at": 0.0})
		requireText(exitOK, "verdict:          healthy",
			"excess:           1 (reported for attribution, never an alarm)",
			"unreadable_created_at: 0")

		seedMessage(t, db, exec, "m-missed", "tc-missed", healthK.Add(2*time.Second))
		requireJSON(exitUnhealthy, map[string]any{"capture_since": since, "verdict": "shortfall", "shortfall": 1.0,
			"excess": 1.0, "collisions": 0.0, "last_observed_at": instant.Format(healthK.Add(time.Second)), "unreadable_created_at": 0.0})
		requireText(exitUnhealthy, "verdict:          shortfall — 1 subagent message(s) since activation have no row",
			"capture_since:    "+since)
	})
}

// Errors exit 2 and say what is wrong: a missing table by name, a
// capture_since that is not an instant by key and value, an unreachable
// database.
func TestCLI_Health_ErrorsExit2(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		code, out, stderr := healthCLI(t, "--db", db.CLIDSN, "--json")
		require.Equal(t, exitUsage, code)
		require.Empty(t, out)
		require.Contains(t, stderr, "missing tables: kandev_meta")

		exec := healthStore(t, db)
		exec(`INSERT INTO kandev_meta (key, value) VALUES (?, ?)`, keys.CaptureSince, "2026-07-30T01:39:37")
		code, _, stderr = healthCLI(t, "--db", db.CLIDSN)
		require.Equal(t, exitUsage, code)
		require.Contains(t, stderr, keys.CaptureSince+` = "2026-07-30T01:39:37"`)

		exec(`UPDATE kandev_meta SET value = ? WHERE key = ?`, instant.Format(healthK), keys.CaptureSince)
		exec(`DROP TABLE task_session_subagents`)
		code, _, stderr = healthCLI(t, "--db", db.CLIDSN, "--json")
		require.Equal(t, exitUsage, code)
		require.Contains(t, stderr, "missing tables: task_session_subagents")

		unreachable := "postgres://postgres@127.0.0.1:1/test?sslmode=disable&connect_timeout=2"
		if db.Dialect == dialect.SQLite {
			unreachable = "sqlite:" + tempPath(t, "no", "such", "dir", "x.db")
		}
		code, out, stderr = healthCLI(t, "--db", unreachable, "--json")
		require.Equal(t, exitUsage, code)
		require.Empty(t, out)
		require.NotEmpty(t, stderr)
	})
}
