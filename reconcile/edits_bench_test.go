package reconcile_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/reconcile"
)

// BenchmarkEdits measures the next schema.hcl edit on a PostgreSQL table
// already in its declared shape while the host reads and writes it (the
// paced load of BenchmarkOnlineUpgrade: 50 point reads, 100 inserts and 100
// updates a second, each on its own connection). For each edit of
// edits_test.go that has an online recipe it runs:
//
//	ours    a reconcile with the edited declaration (the table is above the
//	        online threshold, so the recipe runs)
//	ours_nopause  the same, its fill never resting between batches
//	        (WithCopyPause(0)): what the rest costs
//	floor   the same change as the single statement a host would write
//	        (ALTER … SET NOT NULL; ADD CONSTRAINT … CHECK; ADD CONSTRAINT …
//	        FOREIGN KEY; ADD COLUMN … NOT NULL DEFAULT gen_random_uuid()::text;
//	        DROP INDEX and CREATE INDEX; DROP CONSTRAINT and ADD PRIMARY KEY)
//	update  for the volatile defaults only, the anchor its fill is held
//	        against: ADD COLUMN, then one UPDATE of the whole table
//	alone   for the index and key edits only, PostgreSQL's own operation
//	        that stops nothing, alone: the new definition's CREATE [UNIQUE]
//	        INDEX CONCURRENTLY, with no swap — what the waits of ours are
//	        held beside, as no build that stops nothing can wait less
//
// and reports the worst read, insert and update wait, the total time, and
// for ours the time of its fill phase.
//
//	SCHEMASTATE_BENCH_EDIT_ROWS=1000000,4000000 go test ./reconcile -run '^$' -bench Edits -benchtime 1x -timeout 60m
//
// Rows default to 100000 so a plain -bench run stays short;
// SCHEMASTATE_BENCH_EDITS names the edits (not_null, check, foreign_key,
// volatile_default, index_columns, unique_index, primary_key, …) and
// SCHEMASTATE_BENCH_EDIT_MODES the modes.
func BenchmarkEdits(b *testing.B) {
	sizes := benchSizes(b, "SCHEMASTATE_BENCH_EDIT_ROWS", 100000)
	modes := []string{"ours", "ours_nopause", "floor", "update", "alone"}
	if v := os.Getenv("SCHEMASTATE_BENCH_EDIT_MODES"); v != "" {
		modes = strings.Split(v, ",")
	}
	only := os.Getenv("SCHEMASTATE_BENCH_EDITS")
	for _, rows := range sizes {
		for _, e := range edits {
			if !e.recipe || only != "" && !strings.Contains(","+only+",", ","+e.name+",") {
				continue
			}
			for _, mode := range modes {
				if mode == "alone" && aloneStatements[e.name] == "" {
					continue
				}
				if (mode == "update" || mode == "ours_nopause") && !strings.HasPrefix(e.name, "volatile_default") {
					continue
				}
				b.Run(fmt.Sprintf("rows=%d/%s/%s", rows, e.name, mode), func(b *testing.B) {
					for i := 0; i < b.N; i++ {
						benchEdit(b, rows, e, mode)
					}
				})
			}
		}
	}
}

// floorStatements are the single statements a host would write for each edit.
var floorStatements = map[string][]string{
	"not_null":                  {`ALTER TABLE task_session_subagents ALTER COLUMN turn_id SET NOT NULL`},
	"check":                     {`ALTER TABLE task_session_subagents ADD CONSTRAINT subagents_tokens_nonnegative CHECK (total_tokens >= 0)`},
	"foreign_key":               {`ALTER TABLE task_session_subagents ADD CONSTRAINT subagents_child_session_fkey FOREIGN KEY (child_session_id) REFERENCES task_sessions (id)`},
	"volatile_default":          {`ALTER TABLE task_session_subagents ADD COLUMN uid text NOT NULL DEFAULT gen_random_uuid()::text`},
	"volatile_default_nullable": {`ALTER TABLE task_session_subagents ADD COLUMN nonce text DEFAULT gen_random_uuid()::text`},
	"index_columns":             {`DROP INDEX idx_subagents_task_id`, `CREATE INDEX idx_subagents_task_id ON task_session_subagents (task_id, observed_at)`},
	"unique_index":              {`DROP INDEX idx_subagents_task_id`, `ALTER TABLE task_session_subagents ADD CONSTRAINT idx_subagents_task_id UNIQUE (task_id, tool_call_id)`},
	"primary_key":               {`ALTER TABLE task_session_subagents DROP CONSTRAINT task_session_subagents_pkey, ADD PRIMARY KEY (id, task_id)`},
}

// aloneStatements are PostgreSQL's own concurrent build of each index or
// key edit's new definition, alone.
var aloneStatements = map[string]string{
	"index_columns": `CREATE INDEX CONCURRENTLY bench_alone ON task_session_subagents (task_id, observed_at)`,
	"unique_index":  `CREATE UNIQUE INDEX CONCURRENTLY bench_alone ON task_session_subagents (task_id, tool_call_id)`,
	"primary_key":   `CREATE UNIQUE INDEX CONCURRENTLY bench_alone ON task_session_subagents (id, task_id)`,
}

func benchEdit(b *testing.B, rows int, e edit, mode string) {
	b.StopTimer()
	db := openPostgres(b).Host(b)
	_, err := reconcile.Reconcile(context.Background(), db.DB, quiet)
	require.NoError(b, err)
	db.Exec(b, `INSERT INTO task_sessions (id, task_id) SELECT 's' || i, 'k' || i FROM generate_series(1, 200) i`)
	db.Exec(b, fmt.Sprintf(`INSERT INTO task_session_subagents (id, task_session_id, task_id, turn_id, agent_execution_id, tool_call_id, subagent_type, is_async, total_tokens, tool_use_count, duration_ms, source, observed_at, updated_at)
 SELECT 'r' || i, 's' || (i %% 200 + 1), 'k' || (i %% 200 + 1), 't' || i, 'e1', 'toolu_' || i, 'general', 0, i, i %% 50, i %% 100000, 'live',
   timestamp '2026-07-30 00:00:00' + i * interval '1 ms', timestamp '2026-07-30 00:00:00' + i * interval '1 ms'
 FROM generate_series(1, %d) i`, rows))
	db.Exec(b, `VACUUM ANALYZE task_session_subagents`)
	// The seeding's dirty pages written out before either mode runs: a
	// checkpoint meanwhile would slow whichever ran first.
	db.Exec(b, `CHECKPOINT`)

	ctx, cancel := context.WithCancel(context.Background())
	mon := startMonitors(b, ctx, db, rows, trafficLoads["paced"])
	time.Sleep(time.Second) // a baseline for the loops
	start := time.Now()
	var fill, recipe time.Duration
	var firstPhase time.Time
	b.StartTimer()
	switch mode {
	case "ours", "ours_nopause":
		var fillStart time.Time
		opts := []reconcile.Option{e.declaration(b), reconcile.WithAllowWriterBreak(), reconcile.WithOnlineAbove(1 << 20), reconcile.WithDDLLockTimeout(60 * time.Second),
			reconcile.WithLogger(slog.New(slog.DiscardHandler)),
			reconcile.WithProgress(func(p reconcile.Progress) {
				switch {
				case strings.HasPrefix(p.Message, "phase task_session_subagents.fill."):
					fillStart = time.Now()
				case !fillStart.IsZero() && fill == 0 && strings.HasPrefix(p.Message, "phase "):
					fill = time.Since(fillStart)
				}
				if strings.HasPrefix(p.Message, "phase ") {
					if firstPhase.IsZero() {
						firstPhase = time.Now()
					}
					fmt.Fprintf(os.Stderr, "%8.3fs %s\n", time.Since(start).Seconds(), p.Message)
				}
				if p.Done && p.Step == reconcile.StepShape && !firstPhase.IsZero() {
					recipe = time.Since(firstPhase)
				}
			})}
		if mode == "ours_nopause" {
			opts = append(opts, reconcile.WithCopyPause(0))
		}
		rep, err := reconcile.Reconcile(ctx, db.DB, opts...)
		require.NoError(b, err, describe(rep))
	case "floor":
		if len(floorStatements[e.name]) == 0 {
			b.Fatalf("edit %s has no floor statements", e.name)
		}
		for _, q := range floorStatements[e.name] {
			_, err := db.DB.ExecContext(ctx, q)
			require.NoError(b, err)
		}
	case "alone":
		_, err := db.DB.ExecContext(ctx, aloneStatements[e.name])
		require.NoError(b, err)
	case "update":
		col := map[string]string{"volatile_default": "uid", "volatile_default_nullable": "nonce"}[e.name]
		for _, q := range []string{`ALTER TABLE task_session_subagents ADD COLUMN ` + col + ` text`, `UPDATE task_session_subagents SET ` + col + ` = gen_random_uuid()::text`} {
			_, err := db.DB.ExecContext(ctx, q)
			require.NoError(b, err)
		}
	default:
		b.Fatalf("unknown mode %q", mode)
	}
	b.StopTimer()
	total := time.Since(start)
	time.Sleep(500 * time.Millisecond)
	cancel()
	r := mon.wait()
	b.ReportMetric(float64(r.readerWorst.Microseconds())/1000, "reader_worst_ms")
	b.ReportMetric(float64(r.writerWorst.Microseconds())/1000, "writer_worst_ms")
	b.ReportMetric(float64(r.updaterWorst.Microseconds())/1000, "updater_worst_ms")
	b.ReportMetric(float64(r.exclusiveWorst.Microseconds())/1000, "excl_window_max_ms")
	b.ReportMetric(total.Seconds(), "total_s")
	if fill > 0 {
		b.ReportMetric(fill.Seconds(), "fill_s")
	}
	if recipe > 0 {
		b.ReportMetric(recipe.Seconds(), "recipe_s") // the first phase's start to the shape step's end
	}
	fmt.Fprintf(os.Stderr, "%s %s rows=%d: total %s, worst read %s, insert %s, update %s (medians %s, %s, %s), longest ACCESS EXCLUSIVE %s, fill %s, recipe phases %s, waits %v\n\n",
		e.name, mode, rows, total.Round(time.Millisecond), r.readerWorst, r.writerWorst, r.updaterWorst, r.readerBase, r.writerBase, r.updaterBase,
		r.exclusiveWorst, fill.Round(time.Millisecond), recipe.Round(time.Millisecond), r.waits)
}

// benchSizes reads a comma-separated list of row counts from env, or def.
func benchSizes(b *testing.B, env string, def int) []int {
	v := os.Getenv(env)
	if v == "" {
		return []int{def}
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		var n int
		_, err := fmt.Sscan(strings.TrimSpace(f), &n)
		require.NoError(b, err, "%s", env)
		out = append(out, n)
	}
	return out
}
