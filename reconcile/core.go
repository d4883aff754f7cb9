package reconcile

import "github.com/schemastate/schemastate/reconcile/internal/core"

// The names the sequence shares with the dialects (reconcile/internal/core).
type (
	driver        = core.Driver
	session       = core.Session
	querier       = core.Querier
	phaseHooks    = core.PhaseHooks
	tablePlan     = core.TablePlan
	planContext   = core.PlanContext
	atlasPlanner  = core.AtlasPlanner
	connDiscarder = core.ConnDiscarder
)

var (
	queryStrings   = core.QueryStrings
	placeholders   = core.Placeholders
	restoreSetting = core.RestoreSetting
	said           = core.Said
)
