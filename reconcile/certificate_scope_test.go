package reconcile_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/reconcile"
)

// On PostgreSQL the certificate's catalog read goes by the oids the full
// check read (the tables', their indexes' and constraints'), not by name.
// What an operator does to those objects under other names, or to other
// objects under their names, is still seen: the next boot takes the full
// check, which finds the change (or, where there is none to make, certifies
// again).
func TestReconcile_PostgresCertificateFollowsObjectsNotNames(t *testing.T) {
	changes := map[string]string{
		"the table renamed and another created under its name": `ALTER TABLE task_session_subagents RENAME TO subagents_kept;
CREATE TABLE task_session_subagents (LIKE subagents_kept INCLUDING ALL)`,
		"the table moved to another schema and another created": `CREATE SCHEMA IF NOT EXISTS schemastate_elsewhere;
ALTER TABLE task_session_subagents SET SCHEMA schemastate_elsewhere;
CREATE TABLE task_session_subagents (LIKE schemastate_elsewhere.task_session_subagents INCLUDING ALL)`,
		"a declared index renamed":           `ALTER INDEX idx_subagents_task_id RENAME TO idx_renamed`,
		"a column renamed":                   `ALTER TABLE task_session_subagents RENAME COLUMN model TO model_kept`,
		"a key renamed":                      `ALTER TABLE task_session_subagents RENAME CONSTRAINT task_session_subagents_session_execution_tool_call_key TO key_renamed`,
		"a default set where there was none": `ALTER TABLE task_session_subagents ALTER COLUMN model SET DEFAULT 'm'`,
		"an index's storage parameter":       `ALTER INDEX task_session_subagents_pkey SET (fillfactor = 80)`,
		"a host table dropped and made again": `CREATE TABLE messages_kept (LIKE task_session_messages INCLUDING ALL);
DROP TABLE task_session_messages; ALTER TABLE messages_kept RENAME TO task_session_messages`,
	}
	for name, stmt := range changes {
		t.Run(name, func(t *testing.T) {
			db := dbtest.Open(t, dialect.Postgres).Host(t)
			settle(t, db, quiet)
			db.Exec(t, stmt)
			rep, _ := reconcile.Reconcile(ctx, db.DB, quiet)
			require.NotContains(t, rep.Step(reconcile.StepShape).Detail, certifiedDetail, "the certificate vouched for a changed catalog: %s", describe(rep))
		})
	}
}

// The certificate's scope is data the next boot binds, never text it runs:
// a scope this build did not write is not trusted, and the boot takes the
// full check, which writes its own.
func TestReconcile_PostgresCertificateScopeNotWrittenByThisBuildIsRefused(t *testing.T) {
	for name, scope := range map[string]string{
		"one array short":     "{1};{2};{3}",
		"not oids":            "{1};{2};{3};{x}",
		"statement text":      "{1};{2};{3};{4}'::oid[]); DROP TABLE task_sessions; --",
		"an oid out of range": "{99999999999};{};{};{}",
	} {
		t.Run(name, func(t *testing.T) {
			db := dbtest.Open(t, dialect.Postgres).Host(t)
			settle(t, db, quiet)
			var stored string
			require.NoError(t, db.QueryRow(`SELECT value FROM kandev_meta WHERE key = 'schemastate_shape_certificate'`).Scan(&stored))
			var c map[string]any
			require.NoError(t, json.Unmarshal([]byte(stored), &c))
			require.NotEmpty(t, c["scope"], "the certificate keeps its scope: %s", stored)
			c["scope"] = scope
			edited, err := json.Marshal(c)
			require.NoError(t, err)
			db.Exec(t, `UPDATE kandev_meta SET value = `+quoteLiteral(string(edited))+` WHERE key = 'schemastate_shape_certificate'`)

			rep := mustReconcile(t, db, quiet)
			require.NotContains(t, rep.Step(reconcile.StepShape).Detail, certifiedDetail, describe(rep))
			require.True(t, rep.Certified, "the full check certifies again: %s", describe(rep))
			require.Equal(t, []string{"task_sessions"}, db.Strings(t, `SELECT relname FROM pg_class WHERE relname = 'task_sessions' AND relnamespace = current_schema()::regnamespace`))
			require.Contains(t, mustReconcile(t, db, quiet).Step(reconcile.StepShape).Detail, certifiedDetail)
		})
	}
}

// quoteLiteral is s as a SQL string literal.
func quoteLiteral(s string) string {
	out := []byte{'\''}
	for i := 0; i < len(s); i++ {
		if s[i] == '\'' {
			out = append(out, '\'')
		}
		out = append(out, s[i])
	}
	return string(append(out, '\''))
}
