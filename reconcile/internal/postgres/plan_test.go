package postgres

import (
	"testing"

	atlaspg "ariga.io/atlas/sql/postgres"
	"ariga.io/atlas/sql/schema"
	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/internal/declare"
	"github.com/schemastate/schemastate/internal/ops"
	"github.com/schemastate/schemastate/reconcile/internal/core"
	"github.com/schemastate/schemastate/reconcile/internal/coretest"
)

// The planning rules, with no database (reconcile/internal/coretest).

var atlas = coretest.Atlas{Differ: atlaspg.DefaultDiff, PlanApplier: atlaspg.DefaultPlan}

func pgT(key string, keyCols []string, more func(t *schema.Table)) func() *schema.Table {
	return func() *schema.Table {
		id := schema.NewStringColumn("id", "text")
		t := schema.NewTable("t").AddColumns(id, schema.NewStringColumn("a", "text"), schema.NewStringColumn("b", "text")).SetPrimaryKey(schema.NewPrimaryKey(id))
		schema.New("public").AddTables(t)
		if more != nil {
			more(t)
		}
		if key != "" {
			idx := schema.NewUniqueIndex(key)
			for _, c := range keyCols {
				idx.AddColumns(coretest.Column(t, c))
			}
			t.AddIndexes(idx)
		}
		declare.UniqueConstraints(t)
		return t
	}
}

func TestPlanTable_Postgres(t *testing.T) {
	withC := func(t *schema.Table) {
		t.AddColumns(schema.NewStringColumn("c", "text").SetDefault(&schema.Literal{V: "'unknown'"}))
	}
	legacy := pgT("t_a_b_key", []string{"a", "b"}, nil)
	declared := pgT("t_a_c_b_key", []string{"a", "c", "b"}, withC)
	size := tableSize{bytes: 1 << 20, rows: 1000, version: 160000}
	// What a boot stopped before swap_key leaves: the column, and the key's
	// index built as a plain unique index, not yet the constraint.
	builtNotKey := func() *schema.Table {
		t := pgT("", nil, withC)()
		t.AddIndexes(schema.NewUniqueIndex("t_a_c_b_key").AddColumns(coretest.Column(t, "a"), coretest.Column(t, "c"), coretest.Column(t, "b")))
		return t
	}
	coretest.RunPlanCases(t, Driver{}, atlas, []coretest.PlanCase{
		{Name: "a table under the threshold changes in one transaction", Live: legacy, Want: declared, Facts: tableFacts{size: size}, OnlineAbove: 1 << 30,
			Check: func(t *testing.T, tp *core.TablePlan) {
				require.Equal(t, []string{"shape:alter"}, coretest.PhaseNames(tp))
				require.Equal(t, ops.LockRewrite, tp.Phases[0].Lock)
				require.Contains(t, tp.Phases[0].Detail, "under the online threshold")
			}},
		{Name: "a table at the threshold builds the key concurrently and swaps it", Live: legacy, Want: declared, Facts: tableFacts{size: size},
			Check: func(t *testing.T, tp *core.TablePlan) {
				require.Equal(t, []string{"shape:alter", "shape:build_index", "shape:swap_key"}, coretest.PhaseNames(tp))
				alter, build, swap := tp.Phases[0], tp.Phases[1], tp.Phases[2]
				require.Equal(t, ops.LockCatalog, alter.Lock, "a constant default is catalog-only")
				require.False(t, build.Transactional)
				require.Equal(t, []string{"a", "c", "b"}, build.Key)
				require.Equal(t, []string{`CREATE UNIQUE INDEX CONCURRENTLY "t_a_c_b_key" ON "public"."t" ("a", "c", "b")`}, build.SQL)
				require.NotEmpty(t, build.DoneWhen)
				require.Equal(t, []string{`ALTER TABLE "public"."t" DROP CONSTRAINT "t_a_b_key", ADD CONSTRAINT "t_a_c_b_key" UNIQUE USING INDEX "t_a_c_b_key"`}, swap.SQL)
			}},
		{Name: "the declared key under another name is renamed, catalog-only", Live: pgT("t_auto_key", []string{"a", "c", "b"}, withC), Want: declared, Facts: tableFacts{size: size},
			Check: func(t *testing.T, tp *core.TablePlan) {
				require.Equal(t, []string{"shape:alter"}, coretest.PhaseNames(tp))
				require.Equal(t, []string{`ALTER TABLE "public"."t" RENAME CONSTRAINT "t_auto_key" TO "t_a_c_b_key"`}, tp.Phases[0].SQL)
				require.Equal(t, ops.LockCatalog, tp.Phases[0].Lock)
			}},
		{Name: "a deferrable declared key is dropped and built again", Live: pgT("t_a_c_b_key", []string{"a", "c", "b"}, withC), Want: declared,
			Facts: tableFacts{size: size, deferrable: map[string]bool{"t_a_c_b_key": true}},
			Check: func(t *testing.T, tp *core.TablePlan) {
				require.Equal(t, []string{"shape:alter", "shape:build_index", "shape:swap_key"}, coretest.PhaseNames(tp))
				require.Equal(t, []string{`ALTER TABLE "public"."t" DROP CONSTRAINT "t_a_c_b_key"`}, tp.Phases[0].SQL)
				require.Equal(t, ops.LockRewrite, tp.Phases[0].Lock, "dropping the key is not the rename")
			}},
		{Name: "a NULL tightened to its default is filled in batches, then SET NOT NULL through a validated check", Live: pgT("t_a_c_b_key", []string{"a", "c", "b"}, func(t *schema.Table) {
			t.AddColumns(schema.NewNullStringColumn("c", "text").SetDefault(&schema.Literal{V: "'unknown'"}))
		}), Want: declared, Facts: tableFacts{size: size},
			Check: func(t *testing.T, tp *core.TablePlan) {
				require.Equal(t, []string{"shape:fill", "shape:check_rows", "shape:add_not_valid", "shape:validate", "shape:set_not_null"}, coretest.PhaseNames(tp))
				require.Equal(t, `UPDATE "public"."t" SET "c" = DEFAULT WHERE ctid >= $1::text::tid AND ctid < $2::text::tid AND "c" IS NULL`, tp.Phases[0].SQL[0])
				require.Equal(t, []ops.Kind{ops.KindBatched, ops.KindCheckRows, ops.KindStatements, ops.KindOwnTx, ops.KindStatements}, []ops.Kind{tp.Phases[0].Kind, tp.Phases[1].Kind, tp.Phases[2].Kind, tp.Phases[3].Kind, tp.Phases[4].Kind})
				require.Equal(t, []ops.LockClass{ops.LockRows, ops.LockNone, ops.LockCatalog, ops.LockShareUpdateExclusive, ops.LockCatalog}, []ops.LockClass{tp.Phases[0].Lock, tp.Phases[1].Lock, tp.Phases[2].Lock, tp.Phases[3].Lock, tp.Phases[4].Lock})
				require.Equal(t, []string{`ALTER TABLE "public"."t" ALTER COLUMN "c" SET NOT NULL`, `ALTER TABLE "public"."t" DROP CONSTRAINT IF EXISTS "schemastate_nn_c"`}, tp.Phases[4].SQL)
			}},
		{Name: "an index built but not yet the key resumes online whatever the size", Live: builtNotKey, Want: declared, Facts: tableFacts{size: tableSize{bytes: 8 << 10, version: 160000}}, OnlineAbove: 1 << 30,
			Check: func(t *testing.T, tp *core.TablePlan) {
				require.Equal(t, []string{"index t_a_c_b_key built, not yet the key"}, tp.Resumed)
				require.Equal(t, []string{"shape:build_index", "shape:swap_key"}, coretest.PhaseNames(tp))
				require.Contains(t, tp.Phases[0].Detail, "resuming an online upgrade")
			}},
		{Name: "an INVALID build is dropped before it is built again", Live: builtNotKey, Want: declared, Facts: tableFacts{size: size, invalid: []string{"t_a_c_b_key", "t_operator_idx"}},
			Check: func(t *testing.T, tp *core.TablePlan) {
				require.Equal(t, []string{"INVALID index t_a_c_b_key (dropped and rebuilt)"}, tp.Resumed, "an undeclared INVALID index is not ours")
				require.Equal(t, []string{"shape:build_index", "shape:swap_key"}, coretest.PhaseNames(tp))
				require.Equal(t, `DROP INDEX CONCURRENTLY IF EXISTS "public"."t_a_c_b_key"`, tp.Phases[0].SQL[0])
			}},
		{Name: "a table that does not exist is one create phase", Want: declared, Check: func(t *testing.T, tp *core.TablePlan) {
			require.Equal(t, []string{"shape:create"}, coretest.PhaseNames(tp))
			require.Equal(t, ops.LockCatalog, tp.Phases[0].Lock)
		}},
	})
}
