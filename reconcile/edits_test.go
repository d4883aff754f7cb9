package reconcile_test

import (
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"ariga.io/atlas/sql/schema"
	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate"
	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/hooks"
	"github.com/schemastate/schemastate/internal/ops"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/internal/tool/parity"
	"github.com/schemastate/schemastate/reconcile"
)

// The next schema.hcl edit, on a store already in its declared shape: each
// edit a platform engineer writes converges on both dialects, and on
// PostgreSQL at or above the online threshold (forced here with online)
// runs as a recipe whose exclusive locks are catalog-only.

// edit is one change to the built-in schema.hcl.
type edit struct {
	name string
	// from is replaced by to in the declaration, once.
	from, to string
	// prepare makes the store's rows satisfy the edit.
	prepare string
	// breaks adds a row the edit cannot keep (a NULL, a check, an orphan).
	breaks string
	// constraint is what the PostgreSQL recipe validates (empty: none).
	constraint string
	// recipe: on PostgreSQL above the online threshold the edit runs as a
	// recipe of its own (not one catalog-only ALTER).
	recipe bool
}

const subagentsIndexAnchor = "  index \"idx_subagents_session_id\" {"

var edits = []edit{
	{name: "not_null", from: "column \"turn_id\" {\n    type = local.text\n    null = true", to: "column \"turn_id\" {\n    type = local.text\n    null = false",
		prepare:    `UPDATE task_session_subagents SET turn_id = 't0' WHERE turn_id IS NULL`,
		breaks:     `UPDATE task_session_subagents SET turn_id = NULL WHERE id = 'r2'`,
		constraint: "schemastate_nn_turn_id", recipe: true},
	{name: "check", from: subagentsIndexAnchor, to: "  check \"subagents_tokens_nonnegative\" {\n    expr = \"total_tokens >= 0\"\n  }\n" + subagentsIndexAnchor,
		breaks:     `UPDATE task_session_subagents SET total_tokens = -1 WHERE id = 'r2'`,
		constraint: "subagents_tokens_nonnegative", recipe: true},
	{name: "foreign_key", from: subagentsIndexAnchor,
		to:         "  foreign_key \"subagents_child_session_fkey\" {\n    columns     = [column.child_session_id]\n    ref_columns = [table.task_sessions.column.id]\n  }\n" + subagentsIndexAnchor,
		prepare:    `INSERT INTO task_sessions (id, task_id) VALUES ('ses_child', 'k2')`,
		breaks:     `UPDATE task_session_subagents SET child_session_id = 'ses_orphan' WHERE id = 'r2'`,
		constraint: "subagents_child_session_fkey", recipe: true},
	{name: "volatile_default", from: "  column \"settled_at\" {",
		to:         "  column \"uid\" {\n    type    = local.text\n    null    = false\n    default = local.pg ? sql(\"gen_random_uuid()::text\") : sql(\"(lower(hex(randomblob(16))))\")\n  }\n  column \"settled_at\" {",
		constraint: "schemastate_nn_uid", recipe: true},
	{name: "volatile_default_nullable", from: "  column \"settled_at\" {",
		to:     "  column \"nonce\" {\n    type    = local.text\n    null    = true\n    default = local.pg ? sql(\"gen_random_uuid()::text\") : sql(\"(lower(hex(randomblob(16))))\")\n  }\n  column \"settled_at\" {",
		recipe: true},
	{name: "expression_defaults", from: "  column \"settled_at\" {",
		to: "  column \"seen_at\" {\n    type    = local.timestamp\n    null    = false\n    default = sql(\"CURRENT_TIMESTAMP\")\n  }\n" +
			"  column \"label\" {\n    type    = local.text\n    null    = true\n    default = local.pg ? sql(\"'x'::text\") : sql(\"('x')\")\n  }\n" +
			"  check \"subagents_label_short\" {\n    expr = \"length(label) < 10\"\n  }\n  column \"settled_at\" {"},
	{name: "index_columns", from: taskIndex, to: "  index \"idx_subagents_task_id\" {\n    columns = [column.task_id, column.observed_at]\n  }", recipe: true},
	{name: "unique_index", from: taskIndex, to: "  index \"idx_subagents_task_id\" {\n    unique  = true\n    columns = [column.task_id, column.tool_call_id]\n  }", recipe: true},
	{name: "primary_key", from: "  primary_key {\n    columns = [column.id]\n  }\n  foreign_key \"task_session_subagents_task_session_id_fkey\"",
		to:     "  primary_key {\n    columns = [column.id, column.task_id]\n  }\n  foreign_key \"task_session_subagents_task_session_id_fkey\"",
		recipe: true},
}

// editNamed is the edit of that name.
func editNamed(t *testing.T, name string) edit {
	t.Helper()
	for _, e := range edits {
		if e.name == name {
			return e
		}
	}
	t.Fatalf("no edit %s", name)
	return edit{}
}

// taskIndex is the declaration of idx_subagents_task_id, which the index
// edits redefine under its name.
const taskIndex = "  index \"idx_subagents_task_id\" {\n    columns = [column.task_id]\n  }"

func (e edit) declaration(t testing.TB) reconcile.Option {
	t.Helper()
	return declarationWith(t, e.from, e.to, e.name+".hcl")
}

// declaredStore is a store in the built-in declared shape holding the
// legacy rows, with the edit's preparation applied.
func declaredStore(t *testing.T, db *dbtest.DB, e edit) {
	t.Helper()
	seedLegacyStore(t, db)
	mustReconcile(t, db, quiet)
	if e.prepare != "" {
		db.Exec(t, e.prepare)
	}
}

// editOptions are the options of a boot with the edit, online on PostgreSQL.
// Some edits (a NOT NULL on turn_id, a foreign key on child_session_id)
// break this release's writer: applied here as an operator's override
// would, since these tests are of the recipes that apply them
// (TestReconcile_RefusesAnEditThatBreaksItsOwnWriter is of the refusal).
func editOptions(t *testing.T, e edit, more ...reconcile.Option) []reconcile.Option {
	return append(append([]reconcile.Option{quiet, e.declaration(t), reconcile.WithAllowWriterBreak()}, online...), more...)
}

// requireConverged requires the plan of the edit to be empty, a boot with it
// to run no statement and leave the catalog as it was, and the boot after
// that to take the certified fast path.
func requireConverged(t *testing.T, db *dbtest.DB, opts ...reconcile.Option) {
	t.Helper()
	p, err := reconcile.Plan(ctx, db.DB, opts...)
	require.NoError(t, err)
	for _, tc := range p.Tables() {
		for _, c := range tc.Changes {
			if m, ok := c.(*schema.ModifyColumn); ok {
				t.Logf("%s: %s %v: %#v -> %#v", tc.Table, m.From.Name, m.Change, m.From.Default, m.To.Default)
			} else {
				t.Logf("%s: %T %+v", tc.Table, c, c)
			}
		}
	}
	require.Empty(t, p.Phases(), "the next boot's plan is empty")
	before := catalogVersion(t, db)
	var ran []string
	rep := mustReconcile(t, db, append(opts, reconcile.WithExecHook(func(s string) { ran = append(ran, s) }))...)
	require.Empty(t, ran, "the second boot runs no DDL")
	for _, s := range rep.Steps {
		require.NotEqual(t, reconcile.Failed, s.Status, s.Name)
	}
	require.Equal(t, before, catalogVersion(t, db))
	settle(t, db, opts...)
}

// constraints lists the table's constraints of the recipe's name with their
// validity (PostgreSQL).
func constraints(t *testing.T, db *dbtest.DB, name string) []string {
	t.Helper()
	return db.Strings(t, `SELECT conname || CASE WHEN convalidated THEN '' ELSE ' NOT VALID' END FROM pg_constraint
 WHERE conrelid = 'task_session_subagents'::regclass AND conname = $1`, name)
}

func TestEdit_EveryEditConverges(t *testing.T) {
	for _, e := range edits {
		t.Run(e.name, func(t *testing.T) {
			dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
				declaredStore(t, db, e)
				before := snapshot(t, db)
				rep := mustReconcile(t, db, editOptions(t, e)...)
				if db.Dialect == dialect.Postgres && e.recipe {
					phases := rep.Step(reconcile.StepShape).Phases
					if e.constraint != "" {
						require.Contains(t, phases, "task_session_subagents.validate."+e.constraint, "the online recipe ran")
					}
					for _, id := range phases {
						require.NotContains(t, id, ".alter", "no ALTER under a rewrite lock: %v", phases)
					}
				}
				require.Equal(t, before, snapshot(t, db), "every row intact")
				requireConverged(t, db, editOptions(t, e)...)
				requireEditHolds(t, db, e)
				requireParity(t, db, e)
			})
		})
	}
}

// requireParity requires the edited store's owned tables to be a fresh
// store's, reconciled with the same edited declaration.
func requireParity(t *testing.T, db *dbtest.DB, e edit) {
	t.Helper()
	file := filepath.Join(t.TempDir(), e.name+".hcl")
	require.NoError(t, os.WriteFile(file, []byte(strings.Replace(string(schemastate.SchemaHCL), e.from, e.to, 1)), 0o600))
	fresh := dbtest.Open(t, db.Dialect).Host(t)
	mustReconcile(t, fresh, editOptions(t, e)...)
	want, err := parity.Read(ctx, fresh.DB, file)
	require.NoError(t, err)
	got, err := parity.Read(ctx, db.DB, file)
	require.NoError(t, err)
	require.Empty(t, parity.Compare(want, got), "parity with a fresh store after the edit")
}

// requireEditHolds checks the edit's end state in the rows and the catalog.
func requireEditHolds(t *testing.T, db *dbtest.DB, e edit) {
	t.Helper()
	insert := func(extra string) error {
		_, err := db.DB.Exec(db.Q(`INSERT INTO task_session_subagents (id, task_session_id, task_id, tool_call_id, observed_at, updated_at` + extra))
		return err
	}
	switch e.name {
	case "not_null":
		require.Error(t, insert(`, turn_id) VALUES ('n1', 's1', 'k1', 'toolu_n1', '2026-07-30 01:00:00', '2026-07-30 01:00:00', NULL)`), "NOT NULL enforced")
	case "check":
		require.Error(t, insert(`, total_tokens) VALUES ('n1', 's1', 'k1', 'toolu_n1', '2026-07-30 01:00:00', '2026-07-30 01:00:00', -5)`), "check enforced")
	case "foreign_key":
		require.Error(t, insert(`, child_session_id) VALUES ('n1', 's1', 'k1', 'toolu_n1', '2026-07-30 01:00:00', '2026-07-30 01:00:00', 'nope')`), "foreign key enforced")
	case "volatile_default", "volatile_default_nullable":
		col := map[string]string{"volatile_default": "uid", "volatile_default_nullable": "nonce"}[e.name]
		require.Equal(t, 3, count(t, db, `SELECT COUNT(DISTINCT `+col+`) FROM task_session_subagents WHERE `+col+` IS NOT NULL AND `+col+` <> ''`), "every existing row has its own value")
		require.NoError(t, insert(`) VALUES ('n1', 's1', 'k1', 'toolu_n1', '2026-07-30 01:00:00', '2026-07-30 01:00:00')`))
		require.Equal(t, 4, count(t, db, `SELECT COUNT(DISTINCT `+col+`) FROM task_session_subagents`), "a new row gets the default")
	case "primary_key":
		require.NoError(t, insert(`) VALUES ('r1', 's2', 'k2', 'toolu_9', '2026-07-30 01:00:00', '2026-07-30 01:00:00')`), "the key is (id, task_id)")
		require.Error(t, insert(`) VALUES ('r1', 's2', 'k2', 'toolu_8', '2026-07-30 01:00:00', '2026-07-30 01:00:00')`), "and it is enforced")
	case "unique_index":
		require.Error(t, insert(`) VALUES ('n1', 's2', 'k1', 'toolu_1', '2026-07-30 01:00:00', '2026-07-30 01:00:00')`), "the redefined index is unique")
	case "expression_defaults":
		require.Error(t, insert(`, label) VALUES ('n1', 's1', 'k1', 'toolu_n1', '2026-07-30 01:00:00', '2026-07-30 01:00:00', 'a long label')`), "check enforced")
	}
	if db.Dialect == dialect.Postgres {
		require.Empty(t, constraints(t, db, "schemastate_nn_turn_id"))
		require.Empty(t, constraints(t, db, "schemastate_nn_uid"))
		require.Zero(t, count(t, db, `SELECT COUNT(*) FROM pg_constraint WHERE conrelid = 'task_session_subagents'::regclass AND NOT convalidated`))
	}
}

// A validation that must fail fails before anything is added: the step names
// the table, the constraint, how many rows and their keys; the host's writes
// are not rejected; the next boot tries again and, once the rows are
// corrected, succeeds.
func TestEdit_FailingValidationLeavesNothing(t *testing.T) {
	for _, e := range edits {
		if e.breaks == "" {
			continue
		}
		t.Run(e.name, func(t *testing.T) {
			dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
				declaredStore(t, db, e)
				db.Exec(t, e.breaks)
				before, catalog := snapshot(t, db), catalogVersion(t, db)
				rep, err := reconcile.Reconcile(ctx, db.DB, editOptions(t, e)...)
				require.Error(t, err)
				require.Equal(t, reconcile.Failed, rep.Step(reconcile.StepShape).Status)
				require.Contains(t, err.Error(), "task_session_subagents")
				if db.Dialect == dialect.Postgres {
					require.ErrorIs(t, err, ops.ErrRowsBreakConstraint)
					require.Contains(t, err.Error(), "1 rows of task_session_subagents break")
					require.Contains(t, err.Error(), "(keys r2)")
					require.Contains(t, err.Error(), strings.TrimPrefix(e.constraint, "schemastate_nn_"))
					require.Empty(t, constraints(t, db, e.constraint), "no NOT VALID constraint left behind")
				}
				require.Equal(t, before, snapshot(t, db))
				require.Equal(t, catalog, catalogVersion(t, db), "nothing was added")
				// The host's write of another breaking row is not rejected.
				db.Exec(t, strings.Replace(e.breaks, "'r2'", "'r1'", 1))
				// The next boot tries again.
				_, err = reconcile.Reconcile(ctx, db.DB, editOptions(t, e)...)
				require.Error(t, err)
				db.Exec(t, `DELETE FROM task_session_subagents WHERE id IN ('r1', 'r2')`)
				mustReconcile(t, db, editOptions(t, e)...)
				requireConverged(t, db, editOptions(t, e)...)
			})
		})
	}
}

// A row that breaks the constraint written after the read and before the
// NOT VALID constraint (a host write in between) fails the validation: the
// constraint it validated is dropped, and the rows are named.
func TestEdit_ValidationFailureDropsTheNotValidConstraint(t *testing.T) {
	for _, e := range edits {
		if e.breaks == "" {
			continue
		}
		t.Run(e.name, func(t *testing.T) {
			db := openPostgres(t)
			declaredStore(t, db, e)
			fp := reconcile.WithFailpoint(func(p string) error {
				if p == hooks.FailpointAfterPhase("task_session_subagents.check_rows."+e.constraint) {
					db.Exec(t, e.breaks)
				}
				return nil
			})
			_, err := reconcile.Reconcile(ctx, db.DB, editOptions(t, e, fp)...)
			require.ErrorIs(t, err, ops.ErrRowsBreakConstraint)
			require.Contains(t, err.Error(), "validate."+e.constraint)
			require.Contains(t, err.Error(), "(keys r2)")
			require.Empty(t, constraints(t, db, e.constraint), "the NOT VALID constraint is dropped")
			db.Exec(t, strings.Replace(e.breaks, "'r2'", "'r1'", 1)) // not rejected
			db.Exec(t, `DELETE FROM task_session_subagents WHERE id IN ('r1', 'r2')`)
			mustReconcile(t, db, editOptions(t, e)...)
			requireConverged(t, db, editOptions(t, e)...)
		})
	}
}

// --prune drops an undeclared index of a table above the online threshold
// with DROP INDEX CONCURRENTLY: readers and writers proceed.
func TestEdit_PruneDropsAnIndexConcurrently(t *testing.T) {
	db := openPostgres(t)
	declaredStore(t, db, edit{})
	db.Exec(t, `CREATE INDEX idx_operator_extra ON task_session_subagents (model)`)
	opts := append([]reconcile.Option{quiet, reconcile.WithPrune()}, online...)
	p, err := reconcile.Plan(ctx, db.DB, opts...)
	require.NoError(t, err)
	require.Len(t, p.Phases(), 1)
	ph := p.Phases()[0]
	require.Equal(t, ops.PhaseDropIndex, ph.Name)
	require.Equal(t, ops.KindConcurrent, ph.Kind)
	require.Equal(t, ops.LockShareUpdateExclusive, ph.Lock)
	require.Equal(t, []string{`DROP INDEX CONCURRENTLY IF EXISTS "` + db.Schema + `"."idx_operator_extra"`}, ph.SQL)
	mustReconcile(t, db, opts...)
	require.Zero(t, count(t, db, `SELECT COUNT(*) FROM pg_indexes WHERE schemaname = current_schema() AND indexname = 'idx_operator_extra'`))
	requireConverged(t, db, opts...)
}

// An index of expressions or with a predicate is built CONCURRENTLY too,
// and the edit converges as PostgreSQL prints the index back.
func TestEdit_ExpressionAndPartialIndexBuiltConcurrently(t *testing.T) {
	e := edit{name: "expression_index", from: subagentsIndexAnchor,
		to: "  index \"idx_subagents_model_lower\" {\n    on {\n      expr = \"lower(model)\"\n    }\n  }\n" +
			"  index \"idx_subagents_open\" {\n    columns = [column.task_session_id]\n    where   = \"settled_at IS NULL\"\n  }\n" + subagentsIndexAnchor}
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		declaredStore(t, db, e)
		p, err := reconcile.Plan(ctx, db.DB, editOptions(t, e)...)
		require.NoError(t, err)
		if db.Dialect == dialect.Postgres {
			var got []string
			for _, ph := range p.Phases() {
				got = append(got, fmt.Sprintf("%s %s %s", ph.ID(), ph.Kind, ph.Lock))
			}
			require.Equal(t, []string{
				"task_session_subagents.build_index.idx_subagents_model_lower concurrent share_update_exclusive",
				"task_session_subagents.build_index.idx_subagents_open concurrent share_update_exclusive",
			}, got)
		}
		before := snapshot(t, db)
		mustReconcile(t, db, editOptions(t, e)...)
		require.Equal(t, before, snapshot(t, db))
		requireConverged(t, db, editOptions(t, e)...)
		requireParity(t, db, e)
	})
}

// An index redefined under its name whose new definition the rows break (a
// unique key they duplicate) fails by name and leaves the old index as it
// was, nothing built beside it; once the rows are corrected the next boot
// swaps it in.
func TestEdit_RedefinedIndexTheRowsBreakLeavesTheOldOne(t *testing.T) {
	e := editNamed(t, "unique_index")
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		declaredStore(t, db, e)
		db.Exec(t, `UPDATE task_session_subagents SET task_id = 'k1', tool_call_id = 'toolu_1' WHERE id = 'r3'`)
		before := snapshot(t, db)
		indexes := indexNames(t, db)
		_, err := reconcile.Reconcile(ctx, db.DB, editOptions(t, e)...)
		require.Error(t, err)
		require.Contains(t, err.Error(), "idx_subagents_task_id")
		require.Equal(t, before, snapshot(t, db))
		require.Equal(t, indexes, indexNames(t, db), "the old index stays, nothing is left beside it")
		db.Exec(t, `UPDATE task_session_subagents SET task_id = 'k2', tool_call_id = 'toolu_3' WHERE id = 'r3'`)
		mustReconcile(t, db, editOptions(t, e)...)
		requireConverged(t, db, editOptions(t, e)...)
		requireEditHolds(t, db, e)
	})
}

// Built beside the old index and killed before the swap, with the
// declaration changed back meanwhile: the next boot drops what it built and
// leaves the old index, which is declared again.
func TestEdit_RedefinitionDeclaredBackDropsTheIndexBuiltBeside(t *testing.T) {
	e := editNamed(t, "index_columns")
	db := openPostgres(t)
	declaredStore(t, db, e)
	indexes := indexNames(t, db)
	_, err := reconcile.Reconcile(ctx, db.DB, editOptions(t, e, failAt(hooks.FailpointAfterPhase("task_session_subagents.build_index.schemastate_next_idx_subagents_task_id")))...)
	require.Error(t, err)
	require.Contains(t, strings.Join(indexNames(t, db), "\n"), "schemastate_next_idx_subagents_task_id")
	p, err := reconcile.Plan(ctx, db.DB, append([]reconcile.Option{quiet}, online...)...)
	require.NoError(t, err)
	require.Contains(t, strings.Join(p.Resumed(), " "), "schemastate_next_idx_subagents_task_id")
	mustReconcile(t, db, append([]reconcile.Option{quiet}, online...)...)
	require.Equal(t, indexes, indexNames(t, db))
	requireConverged(t, db, append([]reconcile.Option{quiet}, online...)...)
}

// indexNames lists the owned table's indexes, with their definitions.
func indexNames(t *testing.T, db *dbtest.DB) []string {
	t.Helper()
	if db.Dialect == dialect.SQLite {
		return db.Strings(t, `SELECT name || ' ' || coalesce(sql, '') FROM sqlite_master WHERE type = 'index' AND tbl_name = 'task_session_subagents' ORDER BY name`)
	}
	return db.Strings(t, `SELECT indexname || ' ' || indexdef FROM pg_indexes WHERE schemaname = current_schema() AND tablename = 'task_session_subagents' ORDER BY indexname`)
}

// The host's writers proceed while a validation scans: a writer holding its
// transaction open on the table does not hold up the validate phase.
func TestEdit_ValidationRunsBesideAnOpenWriter(t *testing.T) {
	e := edits[1] // check
	db := openPostgres(t)
	declaredStore(t, db, e)
	other, err := sql.Open("pgx", db.DSN)
	require.NoError(t, err)
	t.Cleanup(func() { other.Close() })
	var tx *sql.Tx
	fp := reconcile.WithFailpoint(func(p string) error {
		if p == hooks.FailpointAfterPhase("task_session_subagents.add_not_valid."+e.constraint) {
			var err error
			if tx, err = other.Begin(); err != nil {
				return err
			}
			_, err = tx.Exec(`UPDATE task_session_subagents SET description = 'open writer' WHERE id = 'r1'`)
			return err
		}
		return nil
	})
	rep := mustReconcile(t, db, editOptions(t, e, fp, reconcile.WithDDLLockTimeout(300*time.Millisecond))...)
	require.Contains(t, rep.Step(reconcile.StepShape).Phases, "task_session_subagents.validate."+e.constraint)
	require.NotNil(t, tx)
	require.NoError(t, tx.Commit())
	require.Equal(t, []string{e.constraint}, constraints(t, db, e.constraint))
}
