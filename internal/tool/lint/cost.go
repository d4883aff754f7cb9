package lint

import "github.com/schemastate/schemastate/internal/ops"

// cost says whether a phase's time grows with the table's rows: what the
// planner says of the phase (Phase.Scans).
func cost(ph ops.Phase) string {
	if ph.Scans {
		return CostRows
	}
	return CostCatalog
}
