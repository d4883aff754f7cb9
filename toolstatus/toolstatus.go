// Package toolstatus is the vocabulary of ACP tool-call statuses that settle a
// subagent (AC-11). It imports nothing of this module, so every write path —
// the live writer in capture and the backfill — classifies against the one
// list without one pulling in the other.
package toolstatus

import "strings"

// Terminal is the closed set of ACP tool-call statuses that settle a subagent
// (AC-11): exactly these six. Callers must not modify it.
var Terminal = []string{"complete", "completed", "success", "error", "failed", "cancelled"}

// IsTerminal reports whether an ACP tool-call status is terminal (AC-11). The
// comparison is exact: statuses are stored and classified verbatim.
// agent_status is never passed here — the agent's own vocabulary is open and
// never decides settlement (AC-10a, AC-11).
func IsTerminal(status string) bool {
	for _, s := range Terminal {
		if status == s {
			return true
		}
	}
	return false
}

// SQLList is Terminal as the inside of a SQL IN list: 'complete', 'completed', …
// The statuses are constants without quotes, so they are spelled as literals.
func SQLList() string {
	return "'" + strings.Join(Terminal, "', '") + "'"
}
