package capture

import "github.com/schemastate/schemastate/toolstatus"

// terminalList is toolstatus.Terminal, the closed set of ACP tool-call
// statuses that settle a subagent (AC-11), as a SQL IN list.
var terminalList = toolstatus.SQLList()
