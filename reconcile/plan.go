package reconcile

import (
	"strings"

	"github.com/schemastate/schemastate/internal/ops"
)

// The plan is a value.
//
// Reconcile reads top to bottom as inspect → diff → plan → apply. Planning
// (shape.go, with each dialect's rules in reconcile/internal/sqlite and
// reconcile/internal/postgres) produces a ShapePlan: for each owned table,
// the list of phases that bring it to its declared shape. A phase is plain data — its
// SQL, whether it runs inside a transaction, the lock it takes, the guards
// that must hold around it, and the catalog query that tells a later boot it
// is already done — and one applier (apply.go) runs it on both dialects, so
// `schemastate plan --json` prints exactly what `reconcile` then runs, and a
// boot that stopped between two phases (a crash, a lock it could not get) is
// re-planned from the live catalog and resumes where the catalog is.

// hostWaits is what the host's traffic waits on under a lock class.
func hostWaits(l ops.LockClass) string {
	switch l {
	case ops.LockCatalog:
		return "every reader and writer of the table, for a catalog change (milliseconds), each attempt bounded by the DDL lock attempt"
	case ops.LockShareRowExclusive:
		return "writers of the table and of the referenced table, for a catalog change (milliseconds), each attempt bounded by the DDL lock attempt; readers proceed"
	case ops.LockRewrite:
		return "every reader and writer of the table, for as long as the table is scanned or rewritten"
	case ops.LockSQLiteWrite:
		return "every writer of the database, for the transaction; readers proceed (WAL) or wait (rollback journal)"
	case ops.LockShareUpdateExclusive:
		return "nothing: readers and writers proceed (other DDL and VACUUM wait)"
	case ops.LockRows:
		return "writers of the rows a batch updates, for one short batch"
	}
	return "nothing"
}

// described fills what a phase says of itself from its kind and lock.
func described(ph ops.Phase) ops.Phase {
	ph.HostWaits = hostWaits(ph.Lock)
	return ph
}

// Phases lists every phase the shape step, then the widen step, would run,
// in order. A table with a refused change has none but the end of a rebuild
// left in flight on it (refusedRebuild).
func (p *ShapePlan) Phases() []ops.Phase {
	var shape, widen []ops.Phase
	for _, t := range p.tables {
		for _, ph := range t.Phases {
			if len(t.Refused) > 0 && ph.Name != ops.PhaseRebuildAbandon && ph.Name != ops.PhaseRebuildFinish {
				continue
			}
			ph = described(ph)
			if ph.Step == StepWiden {
				widen = append(widen, ph)
			} else {
				shape = append(shape, ph)
			}
		}
	}
	return append(shape, widen...)
}

// stepPhases are the phases of one step.
func (p *ShapePlan) stepPhases(step string) []ops.Phase {
	var out []ops.Phase
	for _, ph := range p.Phases() {
		if ph.Step == step {
			out = append(out, ph)
		}
	}
	return out
}

// Resumed describes the artefacts of an online upgrade that stopped between
// two phases (a shadow column, an index built but not yet the key), one line
// per table; empty when no upgrade is in flight.
func (p *ShapePlan) Resumed() []string {
	var out []string
	for _, t := range p.tables {
		if len(t.Resumed) > 0 {
			out = append(out, t.Table+": "+strings.Join(t.Resumed, ", "))
		}
	}
	return out
}
