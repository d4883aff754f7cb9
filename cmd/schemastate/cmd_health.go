package main

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/schemastate/schemastate/health"
	"github.com/schemastate/schemastate/internal/tool/dsn"
	"github.com/schemastate/schemastate/keys"
)

// Exit codes of health: 0 only for healthy; 1 for every other verdict
// (shortfall, nothing_since_activation, not_activated); 2 when the check
// could not be answered (unreachable database, missing tables, a
// capture_since that is not an instant).
const exitUnhealthy = 1

func runHealth(ctx context.Context, e *env, args []string) int {
	fs, dbArg, asJSON := storeFlags(e, "health", "[--db DSN] [--json]", "print the result as one JSON object")
	return runOnDB(ctx, e, fs, args, dbArg, readOnly, func(db *sql.DB, _ dsn.Target) int {
		rep, err := health.Evaluate(ctx, db)
		if err != nil {
			return fail(e, "health", err)
		}
		output(e, *asJSON, rep, printHealth)
		if rep.Verdict != health.Healthy {
			return exitUnhealthy
		}
		return exitOK
	})
}

func printHealth(e *env, r *health.Report) {
	w := e.stdout
	count := func(p *int64, note string) string {
		if p == nil {
			return "not measured"
		}
		return fmt.Sprint(*p) + note
	}
	switch r.Verdict {
	case health.NotActivated:
		fmt.Fprintf(w, "verdict:          not_activated — %s is absent (key state %s); the comparison was not run, and the missing key is the signal\n", keys.CaptureSince, r.KeyState)
	case health.Shortfall:
		fmt.Fprintf(w, "verdict:          shortfall — %d subagent message(s) since activation have no row: the writer is stopped or failing\n", *r.Shortfall)
	case health.NothingSinceActivation:
		fmt.Fprintln(w, "verdict:          nothing_since_activation — no row has been observed since activation")
	default:
		fmt.Fprintln(w, "verdict:          healthy — every subagent message since activation has a row")
	}
	since := "(absent)"
	if r.CaptureSince != nil {
		since = *r.CaptureSince
	}
	last := "none since activation"
	switch {
	case r.CaptureSince == nil:
		last = "not measured"
	case r.LastObservedAt != nil:
		last = *r.LastObservedAt
	}
	fmt.Fprintf(w, "capture_since:    %s\n", since)
	fmt.Fprintf(w, "shortfall:        %s\n", count(r.Shortfall, ""))
	fmt.Fprintf(w, "excess:           %s\n", count(r.Excess, " (reported for attribution, never an alarm)"))
	fmt.Fprintf(w, "collisions:       %s\n", count(r.Collisions, " (rows sharing a session and tool_call_id across executions)"))
	fmt.Fprintf(w, "last_observed_at: %s\n", last)
	fmt.Fprintf(w, "unreadable_created_at: %s\n", count(r.UnreadableCreatedAt,
		" (subagent messages whose created_at is not a time: in no window, and no row derived from them)"))
}
