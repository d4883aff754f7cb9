package capture

import "strings"

// TerminalToolStatuses is the closed set of ACP tool-call statuses that settle a
// subagent (AC-11): exactly these six. It is the one list every write path
// classifies against — the live writer here and the backfill — so the
// enumeration in the spec cannot drift from the code again. Callers must not
// modify it.
var TerminalToolStatuses = []string{"complete", "completed", "success", "error", "failed", "cancelled"}

// IsTerminalToolStatus reports whether an ACP tool-call status is terminal
// (AC-11). The comparison is exact: statuses are stored and classified
// verbatim. agent_status is never passed here — the agent's own vocabulary is
// open and never decides settlement (AC-10a, AC-11).
func IsTerminalToolStatus(status string) bool {
	for _, s := range TerminalToolStatuses {
		if status == s {
			return true
		}
	}
	return false
}

// terminalList is TerminalToolStatuses as a SQL IN list.
var terminalList = "'" + strings.Join(TerminalToolStatuses, "', '") + "'"
