package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
)

// plan --json prints the plan value — every phase with its SQL, transaction,
// kind, lock, what the host waits on and path — and reconcile runs exactly
// those phases.
func TestCLI_PlanPrintsThePhasesReconcileRuns(t *testing.T) {
	db := dbtest.Open(t, dialect.Postgres).Host(t).Legacy(t)
	code, out, stderr := cli(t, "plan", "--db", db.CLIDSN, "--json")
	require.Equal(t, exitChangesPending, code, stderr)
	var plan struct {
		Phases []struct {
			Step, Name, Table, Object, Lock, Detail, Kind string
			HostWaits                                     string `json:"host_waits"`
			SQL                                           []string
			Transactional                                 bool
		}
	}
	decodeJSON(t, out, &plan)
	var want []string
	for _, p := range plan.Phases {
		require.NotEmpty(t, p.SQL)
		require.NotEmpty(t, p.Lock)
		require.Equal(t, "statements", p.Kind, "each phase says how it runs")
		require.NotEmpty(t, p.HostWaits, "and what the host waits on")
		id := p.Table + "." + p.Name
		if p.Object != "" {
			id += "." + p.Object
		}
		want = append(want, id)
	}
	require.Equal(t, []string{"task_session_subagents.alter", "background_agent_log.create", "task_session_subagents.widen"}, want)

	code, out, stderr = cli(t, "reconcile", "--db", db.CLIDSN, "--json")
	require.Equal(t, exitOK, code, stderr)
	var rep struct{ Steps []struct{ Phases []string } }
	decodeJSON(t, out, &rep)
	var ran []string
	for _, s := range rep.Steps {
		ran = append(ran, s.Phases...)
	}
	require.Equal(t, want, ran)
}

// status and plan name an online upgrade stopped between phases, and the
// phase it stopped before.
func TestCLI_StatusNamesAnUpgradeInFlight(t *testing.T) {
	db := dbtest.Open(t, dialect.Postgres).Host(t).Legacy(t)
	// What a boot stopped before swap_key leaves: the column, and the key's
	// index built but not yet the constraint.
	db.Exec(t, `ALTER TABLE task_session_subagents ADD COLUMN agent_execution_id text NOT NULL DEFAULT 'unknown';
CREATE UNIQUE INDEX task_session_subagents_session_execution_tool_call_key ON task_session_subagents (task_session_id, agent_execution_id, tool_call_id)`)
	code, out, stderr := cli(t, "status", "--db", db.CLIDSN)
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, out, "online upgrade stopped between phases: task_session_subagents: index task_session_subagents_session_execution_tool_call_key built, not yet the key; next phase: task_session_subagents.swap_key")
	code, out, _ = cli(t, "plan", "--db", db.CLIDSN)
	require.Equal(t, exitChangesPending, code)
	require.Contains(t, out, "-- online upgrade stopped between phases: task_session_subagents: index task_session_subagents_session_execution_tool_call_key built, not yet the key")
	require.Contains(t, out, "UNIQUE USING INDEX")
}
