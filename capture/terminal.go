package capture

import "github.com/schemastate/schemastate/toolstatus"

// TerminalToolStatuses is the closed set of ACP tool-call statuses that settle a
// subagent (AC-11); it is toolstatus.Terminal, the one list every write path
// classifies against. Callers must not modify it.
var TerminalToolStatuses = toolstatus.Terminal

// IsTerminalToolStatus reports whether an ACP tool-call status is terminal
// (AC-11); see toolstatus.IsTerminal.
func IsTerminalToolStatus(status string) bool { return toolstatus.IsTerminal(status) }

// terminalList is TerminalToolStatuses as a SQL IN list.
var terminalList = toolstatus.SQLList()
