package basestate_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/internal/tool/basestate"
	"github.com/schemastate/schemastate/internal/tool/store"
	"github.com/schemastate/schemastate/keys"
	"github.com/schemastate/schemastate/reconcile"
)

// One list: every state has its own name, and a --state word names one
// state at most.
func TestAll_NamesAndFlagsAreUnique(t *testing.T) {
	names, flags := map[string]bool{}, map[string]bool{}
	for _, s := range basestate.All {
		require.NotEmpty(t, s.Name)
		require.NotEmpty(t, s.Field, s.Name)
		require.NotEmpty(t, s.Description, s.Name)
		require.False(t, names[s.Name], "name %s twice", s.Name)
		names[s.Name] = true
		if s.Flag != "" {
			require.False(t, flags[s.Flag], "flag %s twice", s.Flag)
			flags[s.Flag] = true
			got, ok := basestate.ByFlag(s.Flag)
			require.True(t, ok)
			require.Same(t, s, got)
		}
	}
	got, ok := basestate.ByFlag("legacy")
	require.True(t, ok)
	require.Same(t, basestate.PreAmendment, got, "generate's and demo's legacy is the pre-amendment state")
	_, ok = basestate.ByFlag("")
	require.False(t, ok, "a state without a word is not found by the empty one")
}

// Each state's store is the installed-base state it names, on both dialects.
func TestBuild_EachStoreIsTheStateItNames(t *testing.T) {
	ctx := context.Background()
	for _, d := range []dialect.Dialect{dialect.SQLite, dialect.Postgres} {
		t.Run(string(d), func(t *testing.T) {
			server := ""
			if d == dialect.Postgres {
				dbtest.Open(t, d) // skips (or fails in CI) without a server
				server = dbtest.PostgresDSN()
			}
			sc, err := store.NewScratch(ctx, server, "test")
			require.NoError(t, err)
			defer func() { require.NoError(t, sc.Close()) }()
			for _, s := range basestate.All {
				st, err := s.Build(ctx, sc)
				require.NoError(t, err, s.Name)
				obs, err := reconcile.Observe(ctx, st.DB)
				require.NoError(t, err, s.Name)
				require.Empty(t, obs.MissingHostTables, s.Name)
				_, subagents := obs.Indexes["task_session_subagents"]
				_, lifecycle := obs.Indexes["background_agent_log"]
				switch s {
				case basestate.Fresh, basestate.Predating: // states 1 and 2
					require.False(t, subagents, s.Name)
					require.False(t, lifecycle, s.Name)
					require.Equal(t, keys.Inactive, obs.State, s.Name)
				case basestate.PreAmendment: // states 3 and 4
					require.True(t, subagents, s.Name)
					require.False(t, obs.EndState.ExecutionColumnNotNull, s.Name)
					require.False(t, obs.EndState.TwoColumnUniqueAbsent, s.Name)
					require.Equal(t, keys.CaptureOnly, obs.State, s.Name)
					require.Regexp(t, `^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$`, *obs.Keys.CaptureSince, s.Name)
					require.True(t, lifecycle, "%s: background_agent_log as before transcripts", s.Name)
					require.NotZero(t, rows(t, st), s.Name)
				case basestate.HostDDL: // state 6, without this module
					require.True(t, obs.EndState.KeyBearing(), s.Name)
					require.Equal(t, keys.Inactive, obs.State, s.Name)
					require.True(t, lifecycle, s.Name)
				case basestate.Amended, basestate.OldShape: // state 6
					require.True(t, obs.EndState.KeyBearing(), s.Name)
					require.True(t, obs.EndState.IndexesMatchDeclaration, s.Name)
					require.Equal(t, keys.Activated, obs.State, s.Name)
				default:
					t.Fatalf("no expectation for %s", s.Name)
				}
			}
		})
	}
}

// SeedTables is what a generator builds on: the host's tables and
// task_session_subagents as the state has them, and no rows.
func TestSeedTables_NoRowsAndNothingElse(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		require.NoError(t, basestate.PreAmendment.SeedTables(ctx, db.DB, db.Dialect))
		obs, err := reconcile.Observe(ctx, db.DB)
		require.NoError(t, err)
		require.Contains(t, obs.Indexes, "task_session_subagents")
		require.NotContains(t, obs.Indexes, "background_agent_log")
		require.Equal(t, keys.Inactive, obs.State)
		require.Zero(t, rows(t, &store.Store{DB: db.DB}))
	})
}

func rows(t *testing.T, st *store.Store) int {
	var n int
	require.NoError(t, st.QueryRow(`SELECT COUNT(*) FROM task_session_subagents`).Scan(&n))
	return n
}
