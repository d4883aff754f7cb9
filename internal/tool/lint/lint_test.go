package lint

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/hooks"
	"github.com/schemastate/schemastate/internal/ops"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/internal/tool/basestate"
	"github.com/schemastate/schemastate/internal/tool/dsn"
	"github.com/schemastate/schemastate/internal/tool/store"
	"github.com/schemastate/schemastate/reconcile"
)

// Issue 14: each real edit × both dialects × every installed-base state
// plans the hazards it must, and lint's exit code at the default level
// follows them.
func TestLint_Edits_HazardsAndExitCode(t *testing.T) {
	dbtest.Open(t, dialect.Postgres) // skips (or fails in CI) without a server
	ctx := context.Background()
	for _, e := range edits {
		t.Run(e.name, func(t *testing.T) {
			rep, err := Lint(ctx, Config{New: Source{HCL: e.hcl(t), File: "schema.hcl"}, Base: builtinBase(), DB: dbtest.PostgresDSN()})
			require.NoError(t, err)
			got := map[string][]string{}
			for _, h := range rep.Declaration {
				got[string(h.Dialect)+"/declaration"] = append(got[string(h.Dialect)+"/declaration"], label(h))
			}
			require.Len(t, rep.Runs, 2*len(States), "every dialect × state is planned")
			for _, run := range rep.Runs {
				for _, h := range run.Hazards {
					k := string(run.Dialect) + "/" + run.State
					got[k] = append(got[k], label(h))
				}
			}
			want := with(baseline, e.want)
			for k := range got {
				sort.Strings(got[k])
			}
			for k := range want {
				sort.Strings(want[k])
				if len(want[k]) == 0 {
					delete(want, k)
				}
			}
			require.Equal(t, want, got)
			require.Equal(t, e.exit, rep.Exit(LevelRefused))
			require.Equal(t, len(rep.Hazards()) > 0, rep.Exit(LevelNotice) == 1, "--fail-on any fails on any hazard")
		})
	}
}

// Issue 14: the plan lint prints for a state is what a reconcile of that
// state then runs, statement by statement — for every edit, dialect and
// state. A reconcile that fails part way (a NOT NULL column without a
// default meeting rows) has run a prefix of it.
func TestLint_Edits_PlanIsWhatReconcileRuns(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name  string
		d     dialect.Dialect
		extra []reconcile.Option
	}{
		{"sqlite", dialect.SQLite, nil},
		{"postgres", dialect.Postgres, nil},
		// Every table on the online path: CONCURRENTLY builds, the key swap,
		// expand/copy/contract.
		{"postgres-online", dialect.Postgres, []reconcile.Option{reconcile.WithOnlineAbove(0)}},
	} {
		d := c.d
		t.Run(c.name, func(t *testing.T) {
			server := ""
			if d == dialect.Postgres {
				dbtest.Open(t, d)
				server = dbtest.PostgresDSN()
			}
			for _, e := range edits {
				t.Run(e.name, func(t *testing.T) {
					newFile := filepath.Join(t.TempDir(), "schema.hcl")
					require.NoError(t, os.WriteFile(newFile, e.hcl(t), 0o600))
					sc, err := store.NewScratch(ctx, server, "lint")
					require.NoError(t, err)
					defer func() { require.NoError(t, sc.Close()) }()
					for _, state := range States {
						db, err := Build(ctx, sc, state, "", nil)
						require.NoError(t, err)
						run, err := PlanState(ctx, db, d, state, newFile, c.extra)
						require.NoError(t, err)
						var planned, ran []string
						for _, ph := range run.Phases {
							planned = append(planned, ph.SQL...)
						}
						// The plan is what runs once applied: the writers' check,
						// which refuses some of these edits before any phase, is
						// TestReconcile_RefusesAnEditThatBreaksItsOwnWriter's.
						opts := PlanOptions(d, newFile, append([]reconcile.Option{reconcile.WithLogger(slog.New(slog.DiscardHandler)), reconcile.WithAllowWriterBreak()}, c.extra...))
						rep, err := reconcile.Reconcile(hooks.With(ctx, hooks.Hooks{Executed: func(s string) { ran = append(ran, s) }}), db, opts...)
						if failedStep(rep, reconcile.StepShape) || failedStep(rep, reconcile.StepWiden) {
							require.True(t, hasCode(run, CodeNotNullNoDefault), "%s: an unexpected failure: %v", state, err)
							require.True(t, subsequence(ran, planned), "%s: what ran of a failed plan is some of its statements, in order:\nran %q\nplanned %q", state, ran, planned)
							continue
						}
						// A phase whose done-check already holds when its turn
						// comes is skipped (the plan prints the check): the
						// online copy of a table whose values are all NULL.
						if d == dialect.Postgres {
							did := map[string]bool{}
							for _, st := range rep.Steps {
								for _, id := range st.Phases {
									did[id] = true
								}
							}
							planned = nil
							for _, ph := range run.Phases {
								if !did[ph.ID()] {
									require.NotEmpty(t, ph.DoneWhen, "%s: phase %s has no done-check, yet did not run: %+v", state, ph.ID(), rep.Steps)
									continue
								}
								planned = append(planned, ph.SQL...)
							}
						}
						require.Equal(t, planned, ran, "%s: the plan is what the reconcile ran", state)
					}
				})
			}
		})
	}
}

func hasCode(r Run, code string) bool {
	for _, h := range r.Hazards {
		if h.Code == code {
			return true
		}
	}
	return false
}

func failedStep(rep *reconcile.Report, name string) bool {
	s := rep.Step(name)
	return s != nil && s.Status == reconcile.Failed
}

// subsequence reports whether xs appear in ys in the same order.
func subsequence(xs, ys []string) bool {
	i := 0
	for _, y := range ys {
		if i < len(xs) && xs[i] == y {
			i++
		}
	}
	return i == len(xs)
}

// lintOnline lints edit i (named name) against the built-in declaration on
// PostgreSQL with every table on the online path.
func lintOnline(t *testing.T, i int, name string) *Report {
	t.Helper()
	dbtest.Open(t, dialect.Postgres) // skips (or fails in CI) without a server
	e := edits[i]
	require.Equal(t, name, e.name)
	rep, err := Lint(context.Background(), Config{New: Source{HCL: e.hcl(t), File: "schema.hcl"}, Base: builtinBase(),
		Dialects: []dialect.Dialect{dialect.Postgres}, DB: dbtest.PostgresDSN(), Options: []reconcile.Option{reconcile.WithOnlineAbove(0)}})
	require.NoError(t, err)
	return rep
}

// Issue 14: on the online path (a table at or above the threshold) an
// index is built CONCURRENTLY and a widening is expand/copy/contract: no
// index-not-concurrent, no table-rewrite for them.
func TestLint_OnlinePath_NoExclusiveBuild(t *testing.T) {
	rep := lintOnline(t, 7, "add an index")
	require.Len(t, rep.Runs, len(States))
	for _, run := range rep.Runs {
		if run.State == basestate.Predating.Name {
			continue
		}
		var builds []string
		for _, ph := range run.Phases {
			if ph.Name == ops.PhaseBuildIndex {
				builds = append(builds, ph.Object)
				require.Equal(t, CostRows, ph.Cost)
				require.False(t, ph.Transactional)
			}
		}
		require.Contains(t, builds, "idx_subagents_model", run.State)
		for _, h := range run.Hazards {
			require.NotEqual(t, CodeIndexNotConc, h.Code, "%s: %+v", run.State, h)
			require.NotEqual(t, CodeTableRewrite, h.Code, "%s: %+v", run.State, h)
		}
	}
}

// A dialect other than the two is refused before any store is built: it
// takes neither dialect's rules.
func TestLint_UnknownDialectIsAnError(t *testing.T) {
	_, err := Lint(context.Background(), Config{Dialects: []dialect.Dialect{"mysql"}})
	require.ErrorIs(t, err, ErrEvaluate)
	require.ErrorContains(t, err, `unsupported dialect "mysql"`)
	_, err = openReal(context.Background(), dsn.Target{Dialect: "mysql", Path: filepath.Join(t.TempDir(), "x.db")})
	require.ErrorContains(t, err, `unsupported dialect "mysql"`)
}

// On the online path an index redefined under its name is built beside it
// CONCURRENTLY and swapped in: no hazard of an exclusive build.
func TestLint_OnlinePath_RedefinedIndexSwappedIn(t *testing.T) {
	rep := lintOnline(t, 10, "redefine an index")
	swapped := 0
	for _, run := range rep.Runs {
		for _, ph := range run.Phases {
			if ph.Name == ops.PhaseSwapIndex && ph.Object == "idx_subagents_task_id" {
				swapped++
			}
		}
		for _, h := range run.Hazards {
			require.NotEqual(t, CodeIndexNotConc, h.Code, "%s: %+v", run.State, h)
		}
	}
	require.Positive(t, swapped, "a state holding the index swaps the new definition in")
}
