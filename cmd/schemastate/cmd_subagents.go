package main

import (
	"context"
	"database/sql"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/schemastate/schemastate/fanout"
	"github.com/schemastate/schemastate/internal/tool/dsn"
	"github.com/schemastate/schemastate/internal/tool/termtext"
)

func runSubagents(ctx context.Context, e *env, args []string) int {
	fs, dbArg, asJSON := storeFlags(e, "subagents", "[--db DSN] [--session ID] [--task ID] [--json]", `print {"rows":[…],"summary":{…}}`)
	sessionID := fs.String("session", "", "only this session's rows")
	taskID := fs.String("task", "", "only this task's rows (with --session: that session's rows of it)")
	return runOnDB(ctx, e, fs, args, dbArg, readOnly, func(db *sql.DB, _ dsn.Target) int {
		res, err := fanout.Read(ctx, db, fanout.Scope{SessionID: *sessionID, TaskID: *taskID})
		if err != nil {
			return fail(e, "subagents", err)
		}
		output(e, *asJSON, res, printSubagents)
		return exitOK
	})
}

// printSubagents prints a read's rows, then its counts.
func printSubagents(e *env, res *fanout.Result) {
	printRows(e, res.Rows)
	printSummary(e, &res.Summary)
}

// printRows lists the rows in the order read (AC-13), one per line.
func printRows(e *env, rows []fanout.Row) {
	if len(rows) == 0 {
		fmt.Fprintln(e.stdout, "no rows")
		return
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "task_session_id\ttool_call_id\tagent_execution_id\tsource\tobserved_at\texecution_identity")
	for _, r := range rows {
		// Rows hold what writers sent: escaped, a control sequence in one
		// is shown, never acted on by the terminal (a tab would break the
		// columns, so it is escaped too).
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", cell(r.TaskSessionID), cell(r.ToolCallID), cell(r.AgentExecutionID), cell(r.Source),
			r.ObservedAt.UTC().Format(time.RFC3339Nano), cell(string(r.ExecutionIdentity)))
	}
	_ = tw.Flush()
}

// printSummary says the counts and what must be disclosed beside them, in
// words (subagents, and status for the whole store).
func printSummary(e *env, s *fanout.Summary) {
	w := e.stdout
	fmt.Fprintf(w, "rows:       %d\n", s.Rows)
	fmt.Fprintf(w, "subagents:  %d (distinct session and tool call: a backfilled and a live row of one tool call are one)\n", s.Subagents)
	if s.Executions == nil {
		fmt.Fprintln(w, "executions: not counted (execution_since is absent: no agent_execution_id is an execution identity)")
	} else {
		fmt.Fprintf(w, "executions: %d (distinct real execution ids; 'unknown' is never counted)\n", *s.Executions)
	}
	fmt.Fprintf(w, "by source:  live %d, backfill %d", s.BySource[fanout.SourceLive], s.BySource[fanout.SourceBackfill])
	for _, src := range sortedKeys(s.BySource) {
		if src != fanout.SourceLive && src != fanout.SourceBackfill {
			fmt.Fprintf(w, ", %s %d", termtext.Escape(src), s.BySource[src])
		}
	}
	fmt.Fprintln(w)
	ids := make([]string, 0, len(fanout.Identities))
	for _, id := range fanout.Identities {
		ids = append(ids, fmt.Sprintf("%s %d", id, s.ByIdentity[id]))
	}
	fmt.Fprintf(w, "by execution identity: %s\n", strings.Join(ids, ", "))
	fmt.Fprintln(w, "disclose with these counts:")
	for _, d := range s.Coverage.Disclosures {
		fmt.Fprintf(w, "  - %s\n", termtext.Escape(d))
	}
}

// cell is one value of a text table: escaped (termtext), its tabs and
// newlines too, so it stays one cell of one line.
func cell(s string) string {
	return strings.NewReplacer("\t", `\t`, "\n", `\n`).Replace(termtext.Escape(s))
}

func sortedKeys(m map[string]int64) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
