package reconcile_test

import (
	"bytes"
	"log/slog"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/reconcile"
)

// selfReference is an operator's foreign key from a row to its parent row,
// which schema.hcl does not declare.
const selfReference = "    FOREIGN KEY (parent_tool_call_id) REFERENCES task_session_subagents(id),\n    FOREIGN KEY (task_session_id)"

// seedParentAndChild writes a parent row and, when used, a child naming it
// through the operator's self-reference.
func seedParentAndChild(t *testing.T, db *dbtest.DB, used bool) {
	t.Helper()
	db.Exec(t, `INSERT INTO task_sessions (id, task_id) VALUES ('s1', 'k1');
INSERT INTO task_session_subagents (id, task_session_id, task_id, tool_call_id, source, observed_at, updated_at)
 VALUES ('r1', 's1', 'k1', 'toolu_1', 'live', '2026-07-30 01:39:37+00:00', '2026-07-30 01:39:37+00:00')`)
	if used {
		db.Exec(t, `INSERT INTO task_session_subagents (id, task_session_id, task_id, tool_call_id, parent_tool_call_id, source, observed_at, updated_at)
 VALUES ('r2', 's1', 'k1', 'toolu_2', 'r1', 'live', '2026-07-30 01:39:38+00:00', '2026-07-30 01:39:38+00:00')`)
	}
}

// parentKeyTarget is the table the operator's self-reference names, as the
// catalog reads it.
func parentKeyTarget(t *testing.T, db *dbtest.DB) []string {
	t.Helper()
	if db.Dialect == dialect.SQLite {
		return db.Strings(t, `SELECT "table" FROM pragma_foreign_key_list('task_session_subagents') WHERE "from" = 'parent_tool_call_id'`)
	}
	return db.Strings(t, `SELECT c.confrelid::regclass::text FROM pg_constraint c JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = ANY (c.conkey)
 WHERE c.conrelid = 'task_session_subagents'::regclass AND c.contype = 'f' AND a.attname = 'parent_tool_call_id'`)
}

// Issue 21 item 1: a legacy table carrying an operator's self-referencing
// foreign key is upgraded in one boot with the key naming the table itself
// (the SQLite rebuild used to leave it naming its temporary table, which the
// legacy rename does not rewrite, so every later INSERT failed "no such
// table" under foreign_keys=ON, or, with a row using the key, the shape step
// failed on every boot with a false "introduced foreign-key violations").
// No row is lost, the key is enforced, and the second boot runs no DDL.
func TestReconcile_RebuildKeepsAnOperatorsSelfReference(t *testing.T) {
	for _, c := range []struct {
		name string
		used bool
	}{{"unused", false}, {"used", true}} {
		t.Run(c.name, func(t *testing.T) {
			dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
				db.Host(t)
				legacyWith(t, db, "", "    FOREIGN KEY (task_session_id)", selfReference)
				seedParentAndChild(t, db, c.used)
				if db.Dialect == dialect.SQLite {
					require.Equal(t, []string{"1"}, db.Strings(t, `PRAGMA foreign_keys`), "the host's connections enforce foreign keys")
				}
				before := snapshot(t, db)

				rep := mustReconcile(t, db, quiet)
				require.Equal(t, reconcile.Applied, rep.Step(reconcile.StepShape).Status, describe(rep))
				requireAC33(t, db, freshIndexSet(t, db.Dialect))
				require.Equal(t, []string{"task_session_subagents"}, parentKeyTarget(t, db))
				require.Equal(t, before, snapshot(t, db), "no row lost or changed")

				// The key is there and enforced: a child of a row that exists
				// is written, one of a row that does not is refused.
				db.Exec(t, `INSERT INTO task_session_subagents (id, task_session_id, task_id, agent_execution_id, tool_call_id, parent_tool_call_id, observed_at, updated_at)
 VALUES ('r3', 's1', 'k1', 'exec-1', 'toolu_3', 'r1', '2026-08-01 00:00:00+00:00', '2026-08-01 00:00:00+00:00')`)
				_, err := db.DB.Exec(`INSERT INTO task_session_subagents (id, task_session_id, task_id, agent_execution_id, tool_call_id, parent_tool_call_id, observed_at, updated_at)
 VALUES ('r4', 's1', 'k1', 'exec-1', 'toolu_4', 'no such row', '2026-08-01 00:00:00+00:00', '2026-08-01 00:00:00+00:00')`)
				require.Error(t, err)
				require.Contains(t, strings.ToLower(err.Error()), "foreign key")

				second := mustReconcile(t, db, quiet)
				shape := second.Step(reconcile.StepShape)
				require.Equal(t, reconcile.Unchanged, shape.Status, describe(second))
				require.Zero(t, shape.Statements, describe(second))
				require.True(t, second.Certified, describe(second))
				require.Equal(t, []string{"task_session_subagents"}, parentKeyTarget(t, db))
			})
		})
	}
}

// A self-reference the declaration itself adds (declared, not drift) names
// the table once the upgrade is done, on both dialects, with the row using
// it kept.
func TestReconcile_RebuildAddsADeclaredSelfReference(t *testing.T) {
	decl := declarationWith(t, `  foreign_key "task_session_subagents_task_session_id_fkey" {`,
		"  foreign_key \"task_session_subagents_parent_fkey\" {\n    columns     = [column.parent_tool_call_id]\n    ref_columns = [column.id]\n  }\n"+
			`  foreign_key "task_session_subagents_task_session_id_fkey" {`, "self_reference.hcl")
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		db.Host(t).Legacy(t)
		seedParentAndChild(t, db, true)
		before := snapshot(t, db)

		rep := mustReconcile(t, db, quiet, decl)
		require.Equal(t, reconcile.Applied, rep.Step(reconcile.StepShape).Status, describe(rep))
		require.Equal(t, []string{"task_session_subagents"}, parentKeyTarget(t, db))
		require.Equal(t, before, snapshot(t, db))
		_, err := db.DB.Exec(`INSERT INTO task_session_subagents (id, task_session_id, task_id, agent_execution_id, tool_call_id, parent_tool_call_id, observed_at, updated_at)
 VALUES ('r4', 's1', 'k1', 'exec-1', 'toolu_4', 'no such row', '2026-08-01 00:00:00+00:00', '2026-08-01 00:00:00+00:00')`)
		require.Error(t, err, "the declared key is enforced")
		insertAmendedRow(t, db, "r3")

		second := mustReconcile(t, db, quiet, decl)
		require.Zero(t, second.Step(reconcile.StepShape).Statements, describe(second))
		require.True(t, second.Certified, describe(second))
	})
}

// The same rebuild names the table itself everywhere once it is in place: an
// undeclared self-reference, the table's own trigger, another
// table's trigger and a view that read it, and another table's foreign key.
// Each still works on the host's foreign_keys=ON connections, and the schema
// names no temporary table anywhere.
func TestReconcile_SQLiteRebuildLeavesEveryReferenceOnTheTable(t *testing.T) {
	db := dbtest.Open(t, dialect.SQLite).Host(t)
	legacyWith(t, db, auditTrigger(db.Dialect)+`;
CREATE VIEW subagent_parents AS SELECT c.id AS child, p.id AS parent FROM task_session_subagents c JOIN task_session_subagents p ON p.id = c.parent_tool_call_id;
CREATE TABLE subagent_notes (id TEXT PRIMARY KEY, subagent_id TEXT REFERENCES task_session_subagents (id), note TEXT);
CREATE TRIGGER trg_note_touches AFTER INSERT ON subagent_notes BEGIN UPDATE task_session_subagents SET description = NEW.note WHERE id = NEW.subagent_id; END`,
		"    FOREIGN KEY (task_session_id)", selfReference)
	seedParentAndChild(t, db, true)
	db.Exec(t, `INSERT INTO subagent_notes (id, subagent_id, note) VALUES ('n1', 'r2', 'before')`)
	before := snapshot(t, db)

	mustReconcile(t, db, quiet)
	requireAC33(t, db, freshIndexSet(t, db.Dialect))
	require.Equal(t, before, snapshot(t, db))
	require.Empty(t, db.Strings(t, `SELECT type || ' ' || name FROM sqlite_master WHERE name LIKE 'schemastate_new_%' OR sql LIKE '%schemastate_new_%'`))
	require.Equal(t, []string{"task_session_subagents"}, db.Strings(t, `SELECT "table" FROM pragma_foreign_key_list('subagent_notes')`))
	require.Equal(t, []string{"task_session_subagents"}, parentKeyTarget(t, db))
	require.Equal(t, []string{"r2 r1"}, db.Strings(t, `SELECT child || ' ' || parent FROM subagent_parents`), "the view reads the rebuilt table")

	insertAmendedRow(t, db, "r5")
	require.Contains(t, db.Strings(t, `SELECT subagent_id FROM subagent_audit`), "r5", "the table's own trigger fires")
	db.Exec(t, `INSERT INTO subagent_notes (id, subagent_id, note) VALUES ('n2', 'r5', 'after')`)
	require.Equal(t, []string{"after"}, db.Strings(t, `SELECT description FROM task_session_subagents WHERE id = 'r5'`), "another table's trigger writes the rebuilt table")
	require.Empty(t, db.Strings(t, `SELECT "table" FROM pragma_foreign_key_check`))
}

// A store an earlier build's rebuild left with its self-reference naming the
// temporary table (every INSERT failed "no such table") is repaired by one
// boot: a rebuild names the table again, keeping every row.
func TestReconcile_SQLiteRepairsASelfReferenceNamingTheRebuildsTable(t *testing.T) {
	db := dbtest.Open(t, dialect.SQLite).Host(t)
	legacyWith(t, db, "", "    FOREIGN KEY (task_session_id)", selfReference)
	seedParentAndChild(t, db, true)
	mustReconcile(t, db, quiet)
	before := snapshot(t, db)
	pointSelfReferenceAtTheRebuildsTable(t, db)
	require.Equal(t, []string{"schemastate_new_task_session_subagents"}, parentKeyTarget(t, db))
	_, err := db.DB.Exec(`INSERT INTO task_session_subagents (id, task_session_id, task_id, agent_execution_id, tool_call_id, observed_at, updated_at)
 VALUES ('r3', 's1', 'k1', 'exec-1', 'toolu_3', '2026-08-01 00:00:00+00:00', '2026-08-01 00:00:00+00:00')`)
	require.ErrorContains(t, err, "no such table", "the damage: every write fails")

	rep := mustReconcile(t, db, quiet)
	shape := rep.Step(reconcile.StepShape)
	require.Equal(t, reconcile.Applied, shape.Status, describe(rep))
	require.Contains(t, shape.Detail, "names schemastate_new_task_session_subagents, which does not exist")
	require.Equal(t, []string{"task_session_subagents"}, parentKeyTarget(t, db))
	require.Equal(t, before, snapshot(t, db))
	insertAmendedRow(t, db, "r3")
	requireAC33(t, db, freshIndexSet(t, db.Dialect))
	second := mustReconcile(t, db, quiet)
	require.Zero(t, second.Step(reconcile.StepShape).Statements, describe(second))
	require.True(t, second.Certified, describe(second))
}

// pointSelfReferenceAtTheRebuildsTable rebuilds task_session_subagents as a
// rebuild before the fix did: its self-reference names the new table, and
// the legacy rename leaves it so.
func pointSelfReferenceAtTheRebuildsTable(t *testing.T, db *dbtest.DB) {
	t.Helper()
	conn, err := db.DB.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	var create string
	require.NoError(t, conn.QueryRowContext(ctx, `SELECT sql FROM sqlite_master WHERE name = 'task_session_subagents'`).Scan(&create))
	others := dbtest.StringsFrom(t, db.DB, `SELECT sql FROM sqlite_master WHERE tbl_name = 'task_session_subagents' AND type IN ('index', 'trigger') AND sql IS NOT NULL`)
	self := regexp.MustCompile("REFERENCES [`\"]?task_session_subagents[`\"]? ?\\(")
	require.Len(t, self.FindAllString(create, -1), 1, create)
	create = self.ReplaceAllString(create, "REFERENCES `schemastate_new_task_session_subagents` (")
	create = strings.Replace(create, "task_session_subagents", "schemastate_new_task_session_subagents", 1)
	for _, stmt := range append([]string{`PRAGMA foreign_keys = OFF`, `PRAGMA legacy_alter_table = ON`, `BEGIN`, create,
		`INSERT INTO schemastate_new_task_session_subagents SELECT * FROM task_session_subagents`,
		`DROP TABLE task_session_subagents`,
		`ALTER TABLE schemastate_new_task_session_subagents RENAME TO task_session_subagents`}, append(others,
		`COMMIT`, `PRAGMA legacy_alter_table = OFF`, `PRAGMA foreign_keys = ON`)...) {
		_, err := conn.ExecContext(ctx, stmt)
		require.NoError(t, err, stmt)
	}
}

// Issue 21 item 1: the certificate never vouches for a table whose foreign
// key names a table that does not exist (every write to it fails while
// foreign keys are on). Here the operator's key outlives the operator's
// table it names: the owned table's text is unchanged, yet the certified
// fast path is not taken, the full check runs, finds nothing it can repair
// and says so at WARN, boot after boot, until the key or its table is back.
// (PostgreSQL drops no table a foreign key names: DROP TABLE refuses, or
// CASCADE drops the key with it.)
func TestReconcile_SQLiteNeverCertifiesAForeignKeyNamingNoTable(t *testing.T) {
	db := dbtest.Open(t, dialect.SQLite).Host(t)
	db.Exec(t, `CREATE TABLE subagent_owners (id TEXT PRIMARY KEY)`)
	db.Exec(t, strings.Replace(hostAmendedDDLNotNullID(t, "task_session_id, agent_execution_id, tool_call_id"),
		"    FOREIGN KEY (task_session_id)", "    CONSTRAINT host_owner_fk FOREIGN KEY (agent_id) REFERENCES subagent_owners(id),\n    FOREIGN KEY (task_session_id)", 1))
	settle(t, db, quiet)
	db.Exec(t, `DROP TABLE subagent_owners`)

	for range 2 {
		var logs bytes.Buffer
		rep := mustReconcile(t, db, reconcile.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
		require.False(t, rep.Certified, describe(rep))
		require.NotContains(t, rep.Step(reconcile.StepShape).Detail, certifiedDetail, describe(rep))
		require.Equal(t, reconcile.Applied, rep.Step(reconcile.StepLock).Status, "the full check ran: %s", describe(rep))
		require.Regexp(t, `level=WARN .*task_session_subagents \(agent_id\) references subagent_owners, which does not exist`, logs.String())
	}

	db.Exec(t, `CREATE TABLE subagent_owners (id TEXT PRIMARY KEY)`)
	rep := settle(t, db, quiet)
	require.True(t, rep.Certified, "once the table is back, certified again")
}
