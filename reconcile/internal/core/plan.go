package core

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"ariga.io/atlas/sql/migrate"
	"ariga.io/atlas/sql/schema"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/ident"
	"github.com/schemastate/schemastate/internal/ops"
	"github.com/schemastate/schemastate/internal/typechange"
)

// Step names a dialect's phases carry (ops.Phase.Step), as reconcile
// reports them.
const (
	StepShape    = "shape"
	StepWiden    = "widen"
	StepBackfill = "backfill"
)

// TablePlan is what the shape step would do to one owned table.
type TablePlan struct {
	Table string
	Live  *schema.Table // nil when the table does not exist yet
	Want  *schema.Table
	// Changes are Atlas's changes from Live to Want, drift kept out.
	Changes []schema.Change
	// Refused names each change that would destroy data; a table with any
	// refused change is left exactly as it is.
	Refused []string
	// Drift lists the table's undeclared indexes, foreign keys and checks
	// (drift.go): kept, or dropped by the phases when pruning.
	Drift []Drift
	// Resumed (PostgreSQL) describes what an online upgrade stopped between
	// two phases left in the catalog; empty when none is in flight.
	Resumed []string
	// Phases is the plan as it is applied.
	Phases []ops.Phase
	// Twins, when set, adds to Atlas's diff the changes it misses under a
	// declared name (PostgreSQL's); unset, a check's expression is compared
	// as SQLite stores it (SameCheckText).
	Twins func(changes []schema.Change) []schema.Change
}

// AtlasPlanner is what planning asks of Atlas: the diff and its SQL. Both
// are computations (a migrate.Driver over the live connection in a
// reconcile, Atlas's DefaultDiff and DefaultPlan in the planning tests).
type AtlasPlanner interface {
	schema.Differ
	migrate.PlanApplier
}

// PlanContext is what planning one call's tables shares; it lives for one
// planning of the shape.
type PlanContext struct {
	Atlas       AtlasPlanner
	Schema      string
	File        string // the declaration's, for refusals
	Prune       bool
	OnlineAbove int64
	// Driver renders the drops of names Atlas must not (Driver.DropSQL).
	Driver Driver
}

// Render is the SQL of a change set: Atlas's, for changes whose every name
// is plain (ident.go), after the drops of names that are not, which the
// module quotes itself. Any other name that is not plain is refused by name
// and nothing is rendered.
func (pc *PlanContext) Render(changes ...schema.Change) ([]string, error) {
	out, changes, err := pc.quotedDrops(changes)
	if err != nil {
		return nil, err
	}
	for _, c := range changes {
		if err := ident.AtlasNames(c, ident.RequirePlain); err != nil {
			return nil, err
		}
	}
	if len(changes) == 0 {
		return out, nil
	}
	p, err := pc.Atlas.PlanChanges(context.Background(), "shape", changes)
	if err != nil {
		return nil, err
	}
	for _, c := range p.Changes {
		out = append(out, c.Cmd)
	}
	return out, nil
}

// Diff is one existing table's changes, after the driver normalized the
// live table: the drift split off (kept unless pruning; kept are the drops
// a rebuild must undo) and the destructive changes refused by name.
func (pc *PlanContext) Diff(tp *TablePlan) (changes, kept []schema.Change, err error) {
	changes, err = pc.Atlas.TableDiff(tp.Live, tp.Want)
	if err != nil {
		return nil, nil, fmt.Errorf("diff %s: %w", tp.Table, err)
	}
	// Atlas pairs checks by name and compares nothing else of them, and
	// reads no index part's collation: a declared name holding another
	// expression, or an index of another collation (marked by the driver),
	// is a change too.
	if tp.Twins != nil {
		changes = tp.Twins(changes)
	} else if tp.Live != nil {
		changes = CollationTwins(tp.Live, tp.Want, CheckTwins(tp.Live, tp.Want, SameCheckText, changes))
	}
	changes, tp.Drift, kept = SplitDrift(tp.Table, changes, tp.Want, pc.Prune)
	tp.Changes = changes
	for _, c := range changes {
		if why, bad := typechange.Destructive(pc.dialect(), c); bad {
			tp.Refused = append(tp.Refused, fmt.Sprintf("%s: %s (%s)", tp.Table, why, pc.File))
		}
	}
	return changes, kept, nil
}

func (pc *PlanContext) dialect() dialect.Dialect { return pc.Driver.Dialect() }

// Fills maps each column the declaration makes NOT NULL with a DEFAULT, and
// that is nullable live, to its default as SQL. A NULL there takes the
// default before the column is tightened — otherwise the tightening fails on
// every boot. For agent_execution_id that is AC-31's sentinel: a NULL carries
// no execution identity, exactly what 'unknown' records (AC-33 clause 5).
func Fills(live, want *schema.Table) map[string]string {
	out := map[string]string{}
	for _, wc := range want.Columns {
		lc, ok := live.Column(wc.Name)
		lit, isLit := wc.Default.(*schema.Literal)
		if !ok || !lc.Type.Null || wc.Type.Null || !isLit {
			continue
		}
		v := lit.V
		if _, isString := wc.Type.Type.(*schema.StringType); isString && !strings.HasPrefix(v, "'") {
			v = "'" + strings.ReplaceAll(v, "'", "''") + "'"
		}
		out[wc.Name] = v
	}
	return out
}

// AbandonsRebuild reports whether phases abandon a rebuild in flight.
func AbandonsRebuild(phases []ops.Phase) bool {
	return slices.ContainsFunc(phases, func(ph ops.Phase) bool { return ph.Name == ops.PhaseRebuildAbandon })
}
