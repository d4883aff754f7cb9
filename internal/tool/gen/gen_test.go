package gen_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/health"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/internal/tool/basestate"
	"github.com/schemastate/schemastate/internal/tool/gen"
	"github.com/schemastate/schemastate/keys"
	"github.com/schemastate/schemastate/reconcile"
)

// small writes the whole reference population into a 2 MiB store, so the
// distribution is checked exactly while the test stays fast.
func small(state *basestate.State) gen.Config {
	return gen.Config{ScaleMB: 2, Population: 1, State: state, Seed: 1}
}

func TestExpected_ReferencePopulationAndScaling(t *testing.T) {
	for _, tc := range []struct {
		k                                              float64
		invocations, turns, sessions, async, completed int
		started, none, withModel, nested, missingType  int
		fanOut                                         map[int]int
	}{
		{1, 253, 127, 38, 190, 57, 5, 1, 49, 1, 3, map[int]int{1: 65, 2: 12, 3: 42, 4: 5, 5: 2, 8: 1}},
		{4, 1012, 508, 152, 760, 228, 20, 4, 196, 4, 12, map[int]int{1: 260, 2: 48, 3: 168, 4: 20, 5: 8, 8: 4}},
	} {
		t.Run(fmt.Sprint(tc.k), func(t *testing.T) {
			p := gen.Expected(tc.k)
			require.Equal(t, tc.invocations, p.Invocations())
			require.Equal(t, tc.turns, p.Turns())
			require.Equal(t, tc.sessions, p.Sessions)
			require.Equal(t, tc.fanOut, p.FanOut)
			require.Equal(t, map[string]int{gen.StatusAsyncLaunched: tc.async, gen.StatusCompleted: tc.completed, gen.StatusStarted: tc.started, gen.NoStatus: tc.none}, p.Status)
			require.Equal(t, tc.withModel, p.CompletedWithModel)
			require.Equal(t, tc.nested, p.Nested)
			require.Equal(t, tc.missingType, p.MissingType)
			require.EqualValues(t, 275717, p.MaxTokens)
		})
	}
	// A fraction of the reference still carries every rare shape, and the
	// status mix adds up to the invocations.
	p := gen.Expected(0.1)
	total := 0
	for _, n := range p.Status {
		total += n
	}
	require.Equal(t, p.Invocations(), total)
	require.Equal(t, 1, p.Status[gen.StatusStarted])
	require.Equal(t, 1, p.Status[gen.NoStatus])
	require.GreaterOrEqual(t, p.MissingType, 1)
}

// invocation is one subagent message as stored, decoded.
type invocation struct {
	session, turn string
	meta          struct {
		ToolCallID       string `json:"tool_call_id"`
		ParentToolCallID string `json:"parent_tool_call_id"`
		Status           string `json:"status"`
		Normalized       struct {
			Kind string `json:"kind"`
			Task struct {
				Status         string `json:"status"`
				SubagentType   string `json:"subagent_type"`
				AgentID        string `json:"agent_id"`
				ChildSessionID string `json:"child_session_id"`
				Model          string `json:"model"`
				TotalTokens    *int64 `json:"total_tokens"`
				ToolUseCount   *int64 `json:"tool_use_count"`
				DurationMs     *int64 `json:"duration_ms"`
				IsAsync        *bool  `json:"is_async"`
			} `json:"subagent_task"`
		} `json:"normalized"`
	}
}

func invocations(t *testing.T, db *dbtest.DB) []invocation {
	t.Helper()
	rows, err := db.Query(`SELECT task_session_id, turn_id, metadata FROM task_session_messages WHERE type = 'tool_call' AND metadata LIKE '%subagent_task%'`)
	require.NoError(t, err)
	defer rows.Close()
	var out []invocation
	for rows.Next() {
		var inv invocation
		var meta string
		require.NoError(t, rows.Scan(&inv.session, &inv.turn, &meta))
		require.NoError(t, json.Unmarshal([]byte(meta), &inv.meta), meta)
		require.Equal(t, "subagent_task", inv.meta.Normalized.Kind)
		out = append(out, inv)
	}
	require.NoError(t, rows.Err())
	return out
}

func TestGenerate_ReferenceDistribution(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		sum, err := gen.Generate(ctx, db.DB, small(gen.Predating))
		require.NoError(t, err)
		invs := invocations(t, db)
		require.Len(t, invs, 253)
		require.Equal(t, 253, sum.SubagentMessages)

		status := map[string]int{}
		perTurn := map[string]int{}
		sessions := map[string]bool{}
		toolCalls := map[string]invocation{}
		completedWithModel, nested, missingType := 0, 0, 0
		var maxTokens int64
		for _, inv := range invs {
			st := inv.meta.Normalized.Task
			status[st.Status]++
			perTurn[inv.turn]++
			sessions[inv.session] = true
			require.NotContains(t, toolCalls, inv.meta.ToolCallID, "tool_call_id is unique")
			toolCalls[inv.meta.ToolCallID] = inv
			if st.SubagentType == "" {
				missingType++
			}
			if inv.meta.ParentToolCallID != "" {
				nested++
			}
			switch st.Status {
			case gen.StatusAsyncLaunched:
				require.NotEmpty(t, st.AgentID)
				require.NotEmpty(t, st.Model)
				require.NotNil(t, st.IsAsync)
				require.True(t, *st.IsAsync)
				require.Nil(t, st.TotalTokens, "async_launched reports no metrics")
				require.Nil(t, st.ToolUseCount)
				require.Nil(t, st.DurationMs)
				require.Equal(t, "completed", inv.meta.Status)
			case gen.StatusCompleted:
				require.NotEmpty(t, st.AgentID)
				require.NotNil(t, st.TotalTokens)
				require.NotNil(t, st.ToolUseCount)
				require.NotNil(t, st.DurationMs)
				maxTokens = max(maxTokens, *st.TotalTokens)
				if st.Model != "" {
					completedWithModel++
				}
				require.Nil(t, st.IsAsync)
			case gen.StatusStarted:
				require.NotEmpty(t, st.ChildSessionID)
				require.Empty(t, st.AgentID)
				require.Empty(t, st.Model)
				require.Equal(t, "in_progress", inv.meta.Status)
			case gen.NoStatus:
				require.Empty(t, st.AgentID)
			}
		}
		require.Equal(t, map[string]int{"async_launched": 190, "completed": 57, "started": 5, "": 1}, status)
		require.Equal(t, 49, completedWithModel)
		require.EqualValues(t, 275717, maxTokens)
		require.Equal(t, 3, missingType)
		require.Equal(t, 1, nested)
		require.Len(t, sessions, 38)
		require.Len(t, perTurn, 127)
		hist := map[int]int{}
		for _, n := range perTurn {
			hist[n]++
		}
		require.Equal(t, map[int]int{1: 65, 2: 12, 3: 42, 4: 5, 5: 2, 8: 1}, hist)
		// The nested invocation's parent is another invocation of the same turn.
		for _, inv := range invs {
			if p := inv.meta.ParentToolCallID; p != "" {
				require.Contains(t, toolCalls, p)
				require.Equal(t, inv.turn, toolCalls[p].turn)
			}
		}

		// Ordinary history: '{}' metadata, plus the NULL, '' and 'null' forms.
		for _, where := range []string{"metadata IS NULL", "metadata = ''", "metadata = 'null'", "metadata = '{}'"} {
			var n int
			require.NoError(t, db.QueryRow(`SELECT COUNT(*) FROM task_session_messages WHERE `+where).Scan(&n))
			require.Positive(t, n, where)
		}
		// created_at strictly increases within a session: no two messages of a
		// session share an instant.
		var dup int
		require.NoError(t, db.QueryRow(`SELECT COUNT(*) FROM (SELECT task_session_id, created_at FROM task_session_messages GROUP BY 1, 2 HAVING COUNT(*) > 1) d`).Scan(&dup))
		require.Zero(t, dup)
		if db.Dialect == dialect.SQLite {
			// The host's storage form (keys.RowTime), microsecond precision.
			form := regexp.MustCompile(`^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(\.\d{1,6})?\+00:00$`)
			rows, err := db.Query(`SELECT created_at || '', updated_at || '' FROM task_session_messages`)
			require.NoError(t, err)
			for rows.Next() {
				var c, u string
				require.NoError(t, rows.Scan(&c, &u))
				require.Regexp(t, form, c)
				require.Regexp(t, form, u)
			}
			require.NoError(t, rows.Err())
			rows.Close()
		}
		require.Greater(t, sum.Messages, 1000)
	})
}

// dump reads every host row in a fixed order, as text.
func dump(t *testing.T, db *sql.DB) []string {
	t.Helper()
	var out []string
	for _, q := range []string{
		`SELECT id, task_id, created_at FROM task_sessions ORDER BY id`,
		`SELECT id, task_session_id, task_id, started_at, completed_at, metadata FROM task_session_turns ORDER BY id`,
		`SELECT id, task_session_id, task_id, turn_id, author_type, author_id, content, type, metadata, created_at, updated_at FROM task_session_messages ORDER BY id`,
		`SELECT id, task_session_id, tool_call_id, source, agent_status, tool_status, total_tokens, observed_at, settled_at FROM task_session_subagents ORDER BY id`,
		`SELECT key, value FROM kandev_meta ORDER BY key`,
	} {
		rows, err := db.Query(q)
		require.NoError(t, err)
		cols, _ := rows.Columns()
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			require.NoError(t, rows.Scan(ptrs...))
			out = append(out, fmt.Sprintf("%v", vals))
		}
		require.NoError(t, rows.Err())
		rows.Close()
	}
	return out
}

func TestGenerate_DeterministicForASeed(t *testing.T) {
	for _, d := range []dialect.Dialect{dialect.SQLite, dialect.Postgres} {
		t.Run(string(d), func(t *testing.T) {
			ctx := context.Background()
			a, b, c := dbtest.Open(t, d), dbtest.Open(t, d), dbtest.Open(t, d)
			cfg := small(gen.Legacy)
			_, err := gen.Generate(ctx, a.DB, cfg)
			require.NoError(t, err)
			_, err = gen.Generate(ctx, b.DB, cfg)
			require.NoError(t, err)
			first := dump(t, a.DB)
			require.Greater(t, len(first), 1000)
			require.Equal(t, first, dump(t, b.DB), "two generations with one seed write identical rows")
			cfg.Seed = 2
			_, err = gen.Generate(ctx, c.DB, cfg)
			require.NoError(t, err)
			require.NotEqual(t, first, dump(t, c.DB), "another seed writes another store")
		})
	}
}

func TestGenerate_EachStateIsTheInstalledBaseStateItNames(t *testing.T) {
	secondPrecision := regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$`)
	uuid := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		for _, state := range gen.States {
			t.Run(state.Flag, func(t *testing.T) {
				ctx := context.Background()
				db := dbtest.Open(t, db.Dialect)
				sum, err := gen.Generate(ctx, db.DB, small(state))
				require.NoError(t, err)
				obs, err := reconcile.Observe(ctx, db.DB)
				require.NoError(t, err)
				require.Empty(t, obs.MissingHostTables)
				count := func(where string) int {
					var n int
					require.NoError(t, db.QueryRow(`SELECT COUNT(*) FROM task_session_subagents WHERE `+where).Scan(&n))
					return n
				}
				switch state {
				case gen.Predating: // state 2: history, no table, no keys
					require.NotContains(t, obs.Indexes, "task_session_subagents")
					require.Equal(t, reconcile.EndState{}, obs.EndState)
					require.Equal(t, keys.Inactive, obs.State)
				case gen.Legacy: // states 3 and 4: pre-amendment table, second-precision keys
					require.Contains(t, obs.Indexes, "task_session_subagents")
					require.False(t, obs.EndState.ExecutionColumnNotNull)
					require.False(t, obs.EndState.ThreeColumnUnique)
					require.False(t, obs.EndState.TwoColumnUniqueAbsent, "the two-column UNIQUE is still there")
					require.Equal(t, keys.CaptureOnly, obs.State)
					require.Regexp(t, secondPrecision, *obs.Keys.CaptureSince)
					require.NotNil(t, obs.Keys.BackfillThrough)
					require.Regexp(t, secondPrecision, *obs.Keys.BackfillThrough)
					require.Less(t, *obs.Keys.BackfillThrough, *obs.Keys.CaptureSince)
					live, backfilled := count("source = 'live'"), count("source = 'backfill'")
					require.Positive(t, live)
					require.Positive(t, backfilled)
					require.Equal(t, 253, live+backfilled)
					require.Equal(t, sum.LiveRows, live)
				case gen.Amended: // state 6: declared shape, all keys, live rows with real execution ids
					require.True(t, obs.EndState.KeyBearing())
					require.True(t, obs.EndState.IndexesMatchDeclaration)
					require.Equal(t, keys.Activated, obs.State)
					require.NotNil(t, obs.Keys.BackfillThrough)
					live := count("source = 'live'")
					require.Positive(t, live)
					require.Equal(t, sum.LiveRows, live)
					require.EqualValues(t, sum.BackfillRows, count("source = 'backfill' AND agent_execution_id = 'unknown'"))
					require.Equal(t, 253, live+int(sum.BackfillRows))
					rows, err := db.Query(`SELECT agent_execution_id FROM task_session_subagents WHERE source = 'live'`)
					require.NoError(t, err)
					for rows.Next() {
						var id string
						require.NoError(t, rows.Scan(&id))
						require.Regexp(t, uuid, id)
					}
					rows.Close()
					// The live rows are exactly what a healthy writer leaves.
					h, err := health.Evaluate(ctx, db.DB)
					require.NoError(t, err)
					require.Equal(t, health.Healthy, h.Verdict)
					require.Zero(t, *h.Shortfall)
				}
				// A second generation into the same store is refused.
				_, err = gen.Generate(ctx, db.DB, small(state))
				require.ErrorIs(t, err, gen.ErrNotEmpty)
			})
		}
	})
}

// The scale is the SQLite file's size (PostgreSQL compresses the same rows
// with TOAST); the population follows the scale when not overridden.
func TestGenerate_ScaleSetsTheStoreSize(t *testing.T) {
	db := dbtest.Open(t, dialect.SQLite)
	sum, err := gen.Generate(context.Background(), db.DB, gen.Config{ScaleMB: 12, Seed: 1})
	require.NoError(t, err)
	require.InDelta(t, 12<<20, sum.StoreBytes, 0.2*(12<<20))
	require.Equal(t, gen.Expected(12.0/gen.ReferenceMB), sum.Population)
	require.Equal(t, sum.Population.Invocations(), sum.SubagentMessages)
}

// A state the generator does not write (an installed-base state it has no
// rows for) is refused, naming it.
func TestGenerate_RejectsAnUnknownState(t *testing.T) {
	db := dbtest.Open(t, dialect.SQLite)
	_, err := gen.Generate(context.Background(), db.DB, gen.Config{ScaleMB: 1, State: basestate.HostDDL})
	require.Error(t, err)
	require.True(t, strings.Contains(err.Error(), "host-ddl"))
}

// A dialect other than the two gets neither dialect's store statements.
func TestGen_UnknownDialectIsAnError(t *testing.T) {
	db := dbtest.Open(t, dialect.SQLite)
	_, err := gen.StoreBytes(context.Background(), db.DB, "mysql")
	require.ErrorContains(t, err, `unsupported dialect "mysql"`)
}
