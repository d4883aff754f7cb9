package reconcile_test

import (
	"crypto/sha1"
	"database/sql"
	"encoding/hex"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/hooks"
	"github.com/schemastate/schemastate/internal/ops"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/reconcile"
)

// Done means the declared definition: a same-name twin — an object under a
// declared name with another definition, valid or NOT VALID/INVALID — is
// never taken for the declared one by any step's done-check, nor by the
// diff. Each row plants a twin on a store in its declared shape and requires
// the declared definition after ONE boot, the next plan empty, and the
// boot's report naming what it found.

// twin is one planted twin.
type twin struct {
	name    string
	dialect dialect.Dialect
	// kinds are the step kinds the boot's plan must run through.
	kinds []ops.Kind
	// from and to edit the built-in declaration (none when from is empty).
	from, to string
	// twinFrom and twinTo, when set, make the twin: the store is reconciled
	// once with the declaration so edited (then plant runs, if any).
	twinFrom, twinTo string
	// prepare runs before the twin is planted; plant plants it, one
	// statement at a time (a CONCURRENTLY build may fail on purpose).
	prepare string
	plant   []string
	// read returns one text: the definition compared with a fresh store's.
	read string
	// found is what the boot's report must name.
	found string
	// legacy: the twin is planted on the pre-amendment store, before any
	// boot (else on the store in its declared shape).
	legacy bool
	// stopAt, when set, is the failpoint a first boot stops at, before the
	// twin is planted (a rebuild in flight).
	stopAt string
	// todo, when set, says why the row is not yet run.
	todo string
}

const (
	durationCheck     = "  check \"subagents_duration_nonnegative\" {\n    expr = \"duration_ms >= 0\"\n  }\n"
	durationTwin      = "  check \"subagents_duration_nonnegative\" {\n    expr = \"duration_ms >= -1000\"\n  }\n"
	taskObservedIndex = "  index \"idx_subagents_task_id\" {\n    columns = [column.task_id, column.observed_at]\n  }"
	openTaskIndex     = "  index \"idx_subagents_task_id\" {\n    columns = [column.task_id]\n    where   = \"settled_at IS NULL\"\n  }"
	lowerModelIndex   = "  index \"idx_subagents_model_lower\" {\n    on {\n      expr = \"lower(model)\"\n    }\n  }\n"
	sessionFK         = "task_session_subagents_task_session_id_fkey"
	cascadeLine       = "    on_delete   = CASCADE\n"
	keyName           = "task_session_subagents_session_execution_tool_call_key"
	pgConstraintQ     = `SELECT COALESCE((SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = 'task_session_subagents'::regclass AND conname = '%s'), 'absent')`
	pgIndexQ          = `SELECT COALESCE((SELECT regexp_replace(pg_get_indexdef(i.indexrelid), ' ON \S+ ', ' ON ') || ' valid=' || i.indisvalid FROM pg_index i WHERE i.indexrelid = to_regclass('%s')), 'absent')`
	sqliteTableSQL    = `SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'task_session_subagents'`
)

func q(format, name string) string { return strings.Replace(format, "%s", name, 1) }

// widenedRead is the table's columns and their types, by name.
const widenedRead = `SELECT string_agg(attname || ' ' || format_type(atttypid, atttypmod), ', ' ORDER BY attname) FROM pg_attribute
 WHERE attrelid = 'task_session_subagents'::regclass AND attnum > 0 AND NOT attisdropped`

// rebuildTempIndexName is the name a rebuild builds index name under on its
// new table (reconcile's rebuildTempIndex).
func rebuildTempIndexName(name string) string {
	sum := sha1.Sum([]byte(name))
	return "schemastate_ix_" + hex.EncodeToString(sum[:8])
}

var twins = []twin{
	{name: "check_valid", dialect: dialect.Postgres, kinds: []ops.Kind{ops.KindCheckRows, ops.KindStatements, ops.KindOwnTx},
		from: subagentsIndexAnchor, to: durationCheck + subagentsIndexAnchor,
		plant: []string{`ALTER TABLE task_session_subagents ADD CONSTRAINT subagents_duration_nonnegative CHECK (duration_ms >= -1000)`},
		read:  q(pgConstraintQ, "subagents_duration_nonnegative"), found: "check subagents_duration_nonnegative found as CHECK"},
	{name: "check_not_valid", dialect: dialect.Postgres, kinds: []ops.Kind{ops.KindCheckRows, ops.KindStatements, ops.KindOwnTx},
		from: subagentsIndexAnchor, to: durationCheck + subagentsIndexAnchor,
		plant: []string{`ALTER TABLE task_session_subagents ADD CONSTRAINT subagents_duration_nonnegative CHECK (duration_ms >= -1000) NOT VALID`},
		read:  q(pgConstraintQ, "subagents_duration_nonnegative"), found: "check subagents_duration_nonnegative found as CHECK"},
	{name: "foreign_key_not_valid", dialect: dialect.Postgres, kinds: []ops.Kind{ops.KindCheckRows, ops.KindStatements, ops.KindOwnTx},
		plant: []string{`ALTER TABLE task_session_subagents DROP CONSTRAINT ` + sessionFK + `, ADD CONSTRAINT ` + sessionFK + ` FOREIGN KEY (task_session_id) REFERENCES task_sessions (id) NOT VALID`},
		read:  q(pgConstraintQ, sessionFK), found: "foreign key " + sessionFK + " found as"},
	{name: "foreign_key_valid", dialect: dialect.Postgres, kinds: []ops.Kind{ops.KindCheckRows, ops.KindStatements, ops.KindOwnTx},
		plant: []string{`ALTER TABLE task_session_subagents DROP CONSTRAINT ` + sessionFK + `, ADD CONSTRAINT ` + sessionFK + ` FOREIGN KEY (task_session_id) REFERENCES task_sessions (id)`},
		read:  q(pgConstraintQ, sessionFK), found: "foreign key " + sessionFK + " found as"},
	{name: "foreign_key_deferrable", dialect: dialect.Postgres, kinds: []ops.Kind{ops.KindCheckRows, ops.KindStatements, ops.KindOwnTx},
		plant: []string{`ALTER TABLE task_session_subagents DROP CONSTRAINT ` + sessionFK + `, ADD CONSTRAINT ` + sessionFK + ` FOREIGN KEY (task_session_id) REFERENCES task_sessions (id) ON DELETE CASCADE DEFERRABLE INITIALLY DEFERRED`},
		read:  q(pgConstraintQ, sessionFK), found: "foreign key " + sessionFK + " found as"},
	{name: "not_null_check_not_valid", dialect: dialect.Postgres, kinds: []ops.Kind{ops.KindCheckRows, ops.KindStatements, ops.KindOwnTx},
		from: "column \"turn_id\" {\n    type = local.text\n    null = true", to: "column \"turn_id\" {\n    type = local.text\n    null = false",
		prepare: `UPDATE task_session_subagents SET turn_id = 't0' WHERE turn_id IS NULL`,
		plant:   []string{`ALTER TABLE task_session_subagents ADD CONSTRAINT schemastate_nn_turn_id CHECK (turn_id IS NOT NULL OR duration_ms IS NULL) NOT VALID`},
		read: `SELECT (SELECT attnotnull::text FROM pg_attribute WHERE attrelid = 'task_session_subagents'::regclass AND attname = 'turn_id') || ' ' ||
 (SELECT count(*)::text FROM pg_constraint WHERE conrelid = 'task_session_subagents'::regclass AND conname = 'schemastate_nn_turn_id')`,
		found: "check schemastate_nn_turn_id found as"},
	{name: "index_valid", dialect: dialect.Postgres, kinds: []ops.Kind{ops.KindConcurrent, ops.KindStatements},
		plant: []string{`DROP INDEX idx_subagents_task_id`, `CREATE INDEX idx_subagents_task_id ON task_session_subagents (turn_id)`},
		read:  q(pgIndexQ, "idx_subagents_task_id"), found: "index idx_subagents_task_id found as"},
	{name: "index_invalid", dialect: dialect.Postgres, kinds: []ops.Kind{ops.KindConcurrent},
		// r1 and r2 share task_id k1: the unique build fails and leaves an
		// INVALID, unique index of another definition under the name.
		plant: []string{`DROP INDEX idx_subagents_task_id`, `CREATE UNIQUE INDEX CONCURRENTLY idx_subagents_task_id ON task_session_subagents (task_id)`},
		read:  q(pgIndexQ, "idx_subagents_task_id"), found: "INVALID index idx_subagents_task_id"},
	{name: "index_built_beside", dialect: dialect.Postgres, kinds: []ops.Kind{ops.KindConcurrent, ops.KindStatements},
		from: taskIndex, to: taskObservedIndex,
		plant: []string{`CREATE INDEX schemastate_next_idx_subagents_task_id ON task_session_subagents (turn_id)`},
		read:  q(pgIndexQ, "idx_subagents_task_id") + ` || ' ' || COALESCE(to_regclass('schemastate_next_idx_subagents_task_id')::text, 'none')`,
		found: "index schemastate_next_idx_subagents_task_id built for"},
	{name: "index_predicate_built_beside", dialect: dialect.Postgres, kinds: []ops.Kind{ops.KindConcurrent, ops.KindStatements},
		from: taskIndex, to: openTaskIndex,
		plant: []string{`CREATE INDEX schemastate_next_idx_subagents_task_id ON task_session_subagents (task_id) WHERE settled_at IS NOT NULL`},
		read:  q(pgIndexQ, "idx_subagents_task_id") + ` || ' ' || COALESCE(to_regclass('schemastate_next_idx_subagents_task_id')::text, 'none')`,
		found: "index schemastate_next_idx_subagents_task_id built for"},
	// An index built beside under the recipe's name whose key columns are
	// the declared ones but not its definition: INCLUDE, an operator class,
	// the NULLs' placement. Not the recipe's own: dropped and built again.
	{name: "index_include_built_beside", dialect: dialect.Postgres, kinds: []ops.Kind{ops.KindConcurrent, ops.KindStatements},
		from: taskIndex, to: taskObservedIndex,
		plant: []string{`CREATE INDEX schemastate_next_idx_subagents_task_id ON task_session_subagents (task_id, observed_at) INCLUDE (turn_id)`},
		read:  q(pgIndexQ, "idx_subagents_task_id") + ` || ' ' || COALESCE(to_regclass('schemastate_next_idx_subagents_task_id')::text, 'none')`,
		found: "index schemastate_next_idx_subagents_task_id built for"},
	{name: "index_opclass_built_beside", dialect: dialect.Postgres, kinds: []ops.Kind{ops.KindConcurrent, ops.KindStatements},
		from: taskIndex, to: taskObservedIndex,
		plant: []string{`CREATE INDEX schemastate_next_idx_subagents_task_id ON task_session_subagents (task_id text_pattern_ops, observed_at)`},
		read:  q(pgIndexQ, "idx_subagents_task_id") + ` || ' ' || COALESCE(to_regclass('schemastate_next_idx_subagents_task_id')::text, 'none')`,
		found: "index schemastate_next_idx_subagents_task_id built for"},
	{name: "index_nulls_first_built_beside", dialect: dialect.Postgres, kinds: []ops.Kind{ops.KindConcurrent, ops.KindStatements},
		from: taskIndex, to: taskObservedIndex,
		plant: []string{`CREATE INDEX schemastate_next_idx_subagents_task_id ON task_session_subagents (task_id, observed_at NULLS FIRST)`},
		read:  q(pgIndexQ, "idx_subagents_task_id") + ` || ' ' || COALESCE(to_regclass('schemastate_next_idx_subagents_task_id')::text, 'none')`,
		found: "index schemastate_next_idx_subagents_task_id built for"},
	// The declaration names them: an operator class, a descending part
	// whose NULLs go last, INCLUDE. A build beside that lacks the operator
	// class is not it; after the boot every done-check takes the declared
	// index for done, and the next plan is empty.
	{name: "index_declared_opclass_nulls_include", dialect: dialect.Postgres, kinds: []ops.Kind{ops.KindConcurrent, ops.KindStatements},
		from: taskIndex, to: "  index \"idx_subagents_task_id\" {\n    on {\n      column = column.task_id\n      ops    = text_pattern_ops\n    }\n" +
			"    on {\n      column     = column.observed_at\n      desc       = true\n      nulls_last = true\n    }\n    include = [column.turn_id]\n  }",
		plant: []string{`CREATE INDEX schemastate_next_idx_subagents_task_id ON task_session_subagents (task_id, observed_at DESC NULLS LAST) INCLUDE (turn_id)`},
		read:  q(pgIndexQ, "idx_subagents_task_id") + ` || ' ' || COALESCE(to_regclass('schemastate_next_idx_subagents_task_id')::text, 'none')`,
		found: "index schemastate_next_idx_subagents_task_id built for"},
	// A part of another collation than its column's, which Atlas's
	// inspection does not read: under the declared name (the diff missed
	// it) and built beside.
	{name: "index_collation", dialect: dialect.Postgres, kinds: []ops.Kind{ops.KindConcurrent, ops.KindStatements},
		plant: []string{`DROP INDEX idx_subagents_task_id`, `CREATE INDEX idx_subagents_task_id ON task_session_subagents (task_id COLLATE "C")`},
		read:  q(pgIndexQ, "idx_subagents_task_id"), found: "index idx_subagents_task_id found as index (task_id COLLATE \"C\")"},
	{name: "index_collation_built_beside", dialect: dialect.Postgres, kinds: []ops.Kind{ops.KindConcurrent, ops.KindStatements},
		from: taskIndex, to: taskObservedIndex,
		plant: []string{`CREATE INDEX schemastate_next_idx_subagents_task_id ON task_session_subagents (task_id COLLATE "C", observed_at)`},
		read:  q(pgIndexQ, "idx_subagents_task_id") + ` || ' ' || COALESCE(to_regclass('schemastate_next_idx_subagents_task_id')::text, 'none')`,
		found: "index schemastate_next_idx_subagents_task_id built for"},
	{name: "key_nulls_not_distinct", dialect: dialect.Postgres, kinds: []ops.Kind{ops.KindConcurrent, ops.KindStatements},
		// Under NULLS NOT DISTINCT two rows whose turn-less key parts are
		// NULL collide: another uniqueness than the declared key's.
		plant: []string{`ALTER TABLE task_session_subagents DROP CONSTRAINT ` + keyName + `, ADD CONSTRAINT ` + keyName + ` UNIQUE NULLS NOT DISTINCT (task_session_id, agent_execution_id, tool_call_id)`},
		read:  q(pgConstraintQ, keyName) + ` || ' ' || ` + strings.TrimPrefix(q(pgIndexQ, keyName), "SELECT "),
		found: "index " + keyName + " found as"},
	{name: "index_expression", dialect: dialect.Postgres, kinds: []ops.Kind{ops.KindConcurrent, ops.KindStatements},
		from: subagentsIndexAnchor, to: lowerModelIndex + subagentsIndexAnchor,
		plant: []string{`CREATE INDEX idx_subagents_model_lower ON task_session_subagents (upper(model))`},
		read:  q(pgIndexQ, "idx_subagents_model_lower"), found: "index idx_subagents_model_lower found as"},
	{name: "key_valid", dialect: dialect.Postgres, kinds: []ops.Kind{ops.KindConcurrent, ops.KindStatements},
		// The key's columns in another order: another index, no ON CONFLICT
		// arbiter for the declared column list's index order.
		plant: []string{`ALTER TABLE task_session_subagents DROP CONSTRAINT ` + keyName + `, ADD CONSTRAINT ` + keyName + ` UNIQUE (tool_call_id, task_session_id, agent_execution_id)`},
		read:  q(pgConstraintQ, keyName) + ` || ' ' || ` + strings.TrimPrefix(q(pgIndexQ, keyName), "SELECT "),
		found: "index " + keyName + " found as"},
	{name: "key_deferrable", dialect: dialect.Postgres, kinds: []ops.Kind{ops.KindStatements},
		plant: []string{`ALTER TABLE task_session_subagents DROP CONSTRAINT ` + keyName + `, ADD CONSTRAINT ` + keyName + ` UNIQUE (task_session_id, agent_execution_id, tool_call_id) DEFERRABLE`},
		read:  q(pgConstraintQ, keyName) + ` || ' ' || ` + strings.TrimPrefix(q(pgIndexQ, keyName), "SELECT "),
		found: "unique key " + keyName + " found DEFERRABLE"},
	{name: "key_invalid", dialect: dialect.Postgres, kinds: []ops.Kind{ops.KindConcurrent, ops.KindStatements},
		prepare: `ALTER TABLE task_session_subagents DROP CONSTRAINT ` + keyName + `;
INSERT INTO task_session_subagents (id, task_session_id, task_id, tool_call_id, agent_execution_id, source, observed_at, updated_at)
 SELECT 'dup', task_session_id, task_id, tool_call_id, agent_execution_id, source, observed_at, updated_at FROM task_session_subagents WHERE id = 'r1'`,
		plant: []string{`CREATE UNIQUE INDEX CONCURRENTLY ` + keyName + ` ON task_session_subagents (task_session_id, agent_execution_id, tool_call_id)`,
			`DELETE FROM task_session_subagents WHERE id = 'dup'`},
		read:  q(pgConstraintQ, keyName) + ` || ' ' || ` + strings.TrimPrefix(q(pgIndexQ, keyName), "SELECT "),
		found: "INVALID index " + keyName},
	{name: "widen_shadow_column", dialect: dialect.Postgres, kinds: []ops.Kind{ops.KindStatements, ops.KindBatched}, legacy: true,
		// The pre-amendment table's metrics are integer: a shadow column of
		// the column copy's name, but integer, is no shadow of it.
		plant: []string{`ALTER TABLE task_session_subagents ADD COLUMN total_tokens__schemastate_bigint integer`},
		read:  widenedRead,
		found: "shadow column total_tokens__schemastate_bigint found as"},
	{name: "rebuild_new_table", dialect: dialect.Postgres, kinds: []ops.Kind{ops.KindRebuildCopy, ops.KindRebuildReplay, ops.KindRebuildIndex}, legacy: true,
		// A rebuild stopped after its first index build; its new table's
		// widened column then made integer again: not the rebuild's own.
		stopAt: hooks.FailpointRebuildIndexBuilt,
		plant:  []string{`ALTER TABLE schemastate_new_task_session_subagents ALTER COLUMN total_tokens TYPE integer`},
		read:   widenedRead, found: "column total_tokens of the new table found as integer"},
	{name: "rebuild_index", dialect: dialect.Postgres, kinds: []ops.Kind{ops.KindRebuildIndex}, legacy: true,
		// An index under the rebuild's name for idx_subagents_task_id, of
		// another definition: not the rebuild's own.
		stopAt: hooks.FailpointRebuildIndexBuilt,
		plant: []string{`DROP INDEX IF EXISTS ` + rebuildTempIndexName("idx_subagents_task_id"),
			`CREATE INDEX ` + rebuildTempIndexName("idx_subagents_task_id") + ` ON schemastate_new_task_session_subagents (turn_id)`},
		read: q(pgIndexQ, "idx_subagents_task_id"), found: "for idx_subagents_task_id) found as"},

	{name: "check", dialect: dialect.SQLite, kinds: []ops.Kind{ops.KindStatements},
		from: subagentsIndexAnchor, to: durationCheck + subagentsIndexAnchor, twinFrom: subagentsIndexAnchor, twinTo: durationTwin + subagentsIndexAnchor,
		read:  `SELECT instr(sql, 'duration_ms >= 0') > 0 AND instr(sql, '-1000') = 0 FROM sqlite_master WHERE type = 'table' AND name = 'task_session_subagents'`,
		found: "check subagents_duration_nonnegative found as CHECK"},
	{name: "foreign_key", dialect: dialect.SQLite, kinds: []ops.Kind{ops.KindStatements},
		twinFrom: cascadeLine, twinTo: "",
		read:  `SELECT group_concat("from" || '>' || "table" || '.' || "to" || ' ' || on_delete, ';') FROM pragma_foreign_key_list('task_session_subagents')`,
		found: "found as (task_session_id) REFERENCES task_sessions (id)"},
	{name: "index_predicate", dialect: dialect.SQLite, kinds: []ops.Kind{ops.KindStatements},
		from: taskIndex, to: openTaskIndex, twinFrom: taskIndex, twinTo: strings.Replace(openTaskIndex, "IS NULL", "IS NOT NULL", 1),
		read:  `SELECT sql FROM sqlite_master WHERE name = 'idx_subagents_task_id'`,
		found: "index idx_subagents_task_id found as"},
	{name: "index_collation", dialect: dialect.SQLite, kinds: []ops.Kind{ops.KindStatements},
		plant: []string{`DROP INDEX idx_subagents_task_id`, `CREATE INDEX idx_subagents_task_id ON task_session_subagents (task_id COLLATE NOCASE)`},
		read:  `SELECT sql FROM sqlite_master WHERE name = 'idx_subagents_task_id'`,
		found: "index idx_subagents_task_id found as index (task_id COLLATE NOCASE)"},
	{name: "index", dialect: dialect.SQLite, kinds: []ops.Kind{ops.KindStatements},
		twinFrom: taskIndex, twinTo: "  index \"idx_subagents_task_id\" {\n    columns = [column.turn_id]\n  }",
		read:  `SELECT group_concat(name, ',') FROM pragma_index_info('idx_subagents_task_id')`,
		found: "index idx_subagents_task_id found as"},
}

// twinDeclaration is the built-in declaration with from replaced by to.
func twinDeclaration(t *testing.T, from, to, name string) reconcile.Option {
	t.Helper()
	return declarationWith(t, from, to, name+".hcl")
}

// TestTwins_EveryStepKindHasARow fails for a step kind no twin row covers:
// every Kind constant internal/ops declares (read from its source, so a
// constant left out of ops.Kinds fails too).
func TestTwins_EveryStepKindHasARow(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join("..", "internal", "ops", "ops.go"), nil, 0)
	require.NoError(t, err)
	var declared []ops.Kind
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			v := spec.(*ast.ValueSpec)
			if id, ok := v.Type.(*ast.Ident); ok && id.Name == "Kind" {
				for _, x := range v.Values {
					declared = append(declared, ops.Kind(strings.Trim(x.(*ast.BasicLit).Value, `"`)))
				}
			}
		}
	}
	require.NotEmpty(t, declared)
	require.ElementsMatch(t, declared, ops.Kinds, "ops.Kinds lists every Kind constant")
	for _, k := range declared {
		require.True(t, slices.ContainsFunc(twins, func(w twin) bool { return slices.Contains(w.kinds, k) }), "no twin row for step kind %s", k)
	}
	for _, d := range []dialect.Dialect{dialect.SQLite, dialect.Postgres} {
		require.True(t, slices.ContainsFunc(twins, func(w twin) bool { return w.dialect == d && w.todo == "" }), "no twin row on %s", d)
	}
}

// TestTwins_DeclaredDefinitionAfterOneBoot plants each twin and requires the
// declared definition after one boot.
func TestTwins_DeclaredDefinitionAfterOneBoot(t *testing.T) {
	for _, w := range twins {
		t.Run(string(w.dialect)+"/"+w.name, func(t *testing.T) { w.run(t, w.dialect == dialect.Postgres) })
	}
}

// TestTwins_SingleTransactionPath plants the PostgreSQL twins on a table
// under the online threshold, whose changes are one transaction: the
// declared definition after one boot there too.
func TestTwins_SingleTransactionPath(t *testing.T) {
	for _, w := range twins {
		if w.dialect == dialect.Postgres && w.stopAt == "" {
			t.Run(w.name, func(t *testing.T) { w.run(t, false) })
		}
	}
}

// run plants the twin and boots once, online (every phase its own, the
// plan's kinds required) or not.
func (w twin) run(t *testing.T, onlinePath bool) {
	if w.todo != "" {
		t.Skip("not yet covered: " + w.todo)
	}
	decl := twinDeclaration(t, w.from, w.to, w.name)
	// A twin's declaration may be one this release's writer cannot write
	// (turn_id NOT NULL): applied as an operator's override would, since
	// this is a test of the done-checks.
	opts := []reconcile.Option{quiet, decl, reconcile.WithAllowWriterBreak()}
	if onlinePath {
		opts = append(opts, online...)
	}
	fresh := dbtest.Open(t, w.dialect)
	fresh.Host(t)
	mustReconcile(t, fresh, opts...)
	want := fresh.Strings(t, w.read)

	db := dbtest.Open(t, w.dialect)
	seedLegacyStore(t, db)
	switch {
	case w.legacy:
	case w.twinFrom != "":
		mustReconcile(t, db, quiet, twinDeclaration(t, w.twinFrom, w.twinTo, w.name+"_twin"), reconcile.WithAllowWriterBreak())
	default:
		mustReconcile(t, db, quiet)
	}
	if w.stopAt != "" {
		_, err := reconcile.Reconcile(ctx, db.DB, append(slices.Clone(opts), failAt(w.stopAt))...)
		require.Error(t, err, "the first boot stops at %s", w.stopAt)
	}
	if w.prepare != "" {
		db.Exec(t, w.prepare)
	}
	for _, s := range w.plant {
		_, err := db.DB.ExecContext(ctx, s)
		if w.stopAt != "" {
			require.NoError(t, err, "plant %q", s)
		} else if err != nil {
			t.Logf("plant %q: %v", s, err) // a build that fails on purpose
		}
	}
	if w.stopAt == "" { // else the twin is in the rebuild's new table
		require.NotEqual(t, want, db.Strings(t, w.read), "the twin is planted")
	}

	p, err := reconcile.Plan(ctx, db.DB, opts...)
	require.NoError(t, err)
	require.NotEmpty(t, p.Phases(), "the twin is a change")
	for _, k := range w.kinds {
		if !onlinePath {
			break
		}
		require.True(t, slices.ContainsFunc(p.Phases(), func(ph ops.Phase) bool { return ph.Kind == k }), "the plan runs a %s phase: %v", k, p.Phases())
	}
	// A phase with a done-check sees the twin; one without (SQLite's
	// rebuild, re-derived from the catalog by the diff) is planned.
	checked, undone := 0, 0
	for _, ph := range p.Phases() {
		if ph.DoneWhen != "" {
			// A check may read what an earlier phase adds (an error
			// here is "not done").
			checked++
			var ok bool
			if err := db.QueryRowContext(ctx, ph.DoneWhen).Scan(&ok); err != nil || !ok {
				undone++
			}
		}
	}
	require.True(t, checked == 0 || undone > 0, "a phase's done-check sees the twin")
	rep := mustReconcile(t, db, opts...)
	require.NoError(t, rep.Err(), describe(rep))
	require.Equal(t, want, db.Strings(t, w.read), "the declared definition after one boot: %s", describe(rep))
	// The declared definition is what every done-check of the shape
	// step recognises (a build beside an index is consumed by its
	// swap, a widening's shadows by its contract).
	for _, ph := range p.Phases() {
		if ph.DoneWhen != "" && ph.Step == reconcile.StepShape && !strings.HasPrefix(ph.Object, "schemastate_next_") {
			require.True(t, done(t, db, ph), "%s is done after the boot: %s", ph.ID(), ph.DoneWhen)
		}
	}
	if w.found != "" {
		require.Contains(t, describe(rep), w.found, "the report names the twin it found")
	}
	p, err = reconcile.Plan(ctx, db.DB, opts...)
	require.NoError(t, err)
	require.Empty(t, p.Phases(), "the next plan is empty")
	require.True(t, observeWith(t, db, opts...).EndState.KeyBearing(), "the end state after the boot")
}

// done evaluates the phase's done-check.
func done(t *testing.T, db *dbtest.DB, ph ops.Phase) bool {
	t.Helper()
	var ok bool
	require.NoError(t, db.QueryRowContext(ctx, ph.DoneWhen).Scan(&ok), ph.DoneWhen)
	return ok
}

func observeWith(t *testing.T, db *dbtest.DB, opts ...reconcile.Option) *reconcile.Observation {
	t.Helper()
	obs, err := reconcile.Observe(ctx, db.DB, opts...)
	require.NoError(t, err)
	return obs
}

// On a read-only connection (a standby, default_transaction_read_only) no
// scratch table can be made: the plan still sees a check twin (both
// expressions deparsed by the server) and takes the declared check, spelled
// otherwise, for no change.
func TestPlan_CheckTwinSeenOnAReadOnlyConnection(t *testing.T) {
	db := openPostgres(t)
	seedLegacyStore(t, db)
	decl := twinDeclaration(t, subagentsIndexAnchor, durationCheck+subagentsIndexAnchor, "check")
	mustReconcile(t, db, quiet, decl)
	ro, err := sql.Open("pgx", dbtest.WithParam(t, db.DSN, "default_transaction_read_only", "on"))
	require.NoError(t, err)
	t.Cleanup(func() { ro.Close() })
	_, err = ro.ExecContext(ctx, `CREATE TEMPORARY TABLE probe (x int)`)
	require.Error(t, err, "the connection is read-only")

	p, err := reconcile.Plan(ctx, ro, decl)
	require.NoError(t, err)
	require.Empty(t, p.Phases(), "the declared check, stored as (duration_ms >= 0), is no change")

	db.Exec(t, `ALTER TABLE task_session_subagents DROP CONSTRAINT subagents_duration_nonnegative;
ALTER TABLE task_session_subagents ADD CONSTRAINT subagents_duration_nonnegative CHECK (duration_ms >= -1000)`)
	p, err = reconcile.Plan(ctx, ro, decl)
	require.NoError(t, err)
	require.NotEmpty(t, p.Phases(), "the twin is a change")
	require.Contains(t, strings.Join(p.Statements(), "\n"), "duration_ms >= 0")
}
