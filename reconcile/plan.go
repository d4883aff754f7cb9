package reconcile

import "strings"

// The plan is a value.
//
// Reconcile reads top to bottom as inspect → diff → plan → apply. Planning
// (shape.go, with each dialect's rules in sqlite_plan.go and
// postgres_plan.go) produces a ShapePlan: for each owned table, the list of
// phases that bring it to its declared shape. A phase is plain data — its
// SQL, whether it runs inside a transaction, the lock it takes, the guards
// that must hold around it, and the catalog query that tells a later boot it
// is already done — and one applier (apply.go) runs it on both dialects, so
// `schemastate plan --json` prints exactly what `reconcile` then runs, and a
// boot that stopped between two phases (a crash, a lock it could not get) is
// re-planned from the live catalog and resumes where the catalog is.

// LockClass is the strongest table lock a phase takes, and for how long.
type LockClass string

const (
	// LockSQLiteWrite is SQLite's database write lock, held by the one
	// BEGIN IMMEDIATE transaction of a SQLite reconcile.
	LockSQLiteWrite LockClass = "sqlite_write"
	// LockCatalog is ACCESS EXCLUSIVE for a catalog-only change (add a column
	// with a constant default, attach an index as a constraint, drop or rename
	// a column): milliseconds, independent of the row count. Every such
	// statement runs under a short lock_timeout and is retried.
	LockCatalog LockClass = "access_exclusive_catalog"
	// LockRewrite is ACCESS EXCLUSIVE held while the table is scanned or
	// rewritten: readers and writers wait for as long as that takes. Only the
	// small-table path and changes with no online form take it.
	LockRewrite LockClass = "access_exclusive_rewrite"
	// LockShareUpdateExclusive is what CREATE/DROP INDEX CONCURRENTLY take:
	// readers and writers proceed.
	LockShareUpdateExclusive LockClass = "share_update_exclusive"
	// LockRows is row locks only: the batched copy's short UPDATEs.
	LockRows LockClass = "row_exclusive"
	// LockNone is no lock a host's reader or writer waits on: the rebuild's
	// copy and replay read the live table (ACCESS SHARE) and write only the
	// rebuild's private tables; its index builds lock only those.
	LockNone LockClass = "none"
)

// Phase names.
const (
	PhaseCreate        = "create"         // CREATE TABLE and its indexes
	PhaseAlter         = "alter"          // one transaction of ALTERs (the small-table path, or the catalog-only changes)
	PhaseRebuild       = "rebuild"        // SQLite's copy path
	PhaseBuildIndex    = "build_index"    // CREATE [UNIQUE] INDEX CONCURRENTLY, outside a transaction
	PhaseSwapKey       = "swap_key"       // DROP CONSTRAINT <old>, ADD CONSTRAINT … UNIQUE USING INDEX
	PhaseDropIndex     = "drop_index"     // DROP INDEX CONCURRENTLY
	PhaseWiden         = "widen"          // ALTER COLUMN … TYPE in one transaction
	PhaseWidenExpand   = "widen_expand"   // shadow columns and the trigger that keeps them equal
	PhaseWidenCopy     = "widen_copy"     // batched copy into the shadow columns
	PhaseWidenContract = "widen_contract" // drop the old columns, rename the shadows in their place

	// The shadow-table rebuild (postgres_rebuild.go).
	PhaseRebuildAbandon = "rebuild_abandon" // drop a rebuild's artefacts, to start again or take the column copy
	PhaseRebuildPrepare = "rebuild_prepare" // the new table, the changed-id log and its trigger, the state row
	PhaseRebuildCopy    = "rebuild_copy"    // INSERT … SELECT into the new table by ctid range, in batches
	PhaseRebuildReplay  = "rebuild_replay"  // the logged ids deleted from the new table and copied again
	PhaseRebuildIndex   = "rebuild_index"   // CREATE INDEX on the new, private table
	PhaseRebuildSwap    = "rebuild_swap"    // replay the rest under the table's lock, drop it, rename the new one in
	PhaseRebuildFinish  = "rebuild_finish"  // VALIDATE the carried foreign keys, ANALYZE, drop the state
)

// Phase is one unit of a plan.
type Phase struct {
	// Step is the reconcile step that runs the phase: shape or widen.
	Step  string `json:"step"`
	Name  string `json:"name"`
	Table string `json:"table"`
	// Object names what the phase is about when a table has several of the
	// same kind (the index of a build_index phase).
	Object string `json:"object,omitempty"`
	// SQL runs in order. For widen_copy it is the statement of one batch,
	// run with the batch's page range ($1, $2) until the table's pages at the
	// start of the copy are covered.
	SQL []string `json:"sql"`
	// Transactional phases run all their SQL in one transaction; the others
	// run statement by statement (CONCURRENTLY cannot run in a transaction).
	Transactional bool      `json:"transactional"`
	Lock          LockClass `json:"lock"`
	// DoneWhen is a query returning one boolean, true when the live catalog
	// already shows this phase done; it is checked right before the phase
	// runs. Empty when the phase is re-derived from the catalog on every
	// boot instead (a phase of the single-transaction path).
	DoneWhen string `json:"done_when,omitempty"`
	// BlockedBy is a query returning one text row per object that would make
	// the phase fail (a view reading a column about to be dropped). Any row
	// fails the phase by name before it changes anything.
	BlockedBy string `json:"blocked_by,omitempty"`
	// Cleanup runs, outside a transaction, when a non-transactional phase
	// fails part way: it removes what the failure left (an INVALID index).
	Cleanup []string `json:"cleanup,omitempty"`
	// Detail says why the phase is planned this way (the path chosen and the
	// live table size it was chosen from).
	Detail string `json:"detail,omitempty"`
	// Guards are the checks and settings the applier runs around SQL, in
	// the phase's transaction (a SQLite rebuild's row count, its
	// foreign_key_check and legacy_alter_table). A guard that does not hold
	// fails the phase, and its transaction rolls back.
	Guards []Guard `json:"guards,omitempty"`
	// Key is the columns of the unique key a build_index phase builds: a
	// build that fails on duplicates names the duplicated keys over them.
	Key []string `json:"key,omitempty"`
}

// GuardKind says what a guard checks or sets, and so how the applier runs it.
type GuardKind string

const (
	// GuardNoNulls: SQL[0] returns a row holding NULL in Column, which the
	// phase makes NOT NULL with nothing to fill it with, so the row could
	// not be kept: any row fails the phase (ErrNullRow), naming it by Names
	// (the query's columns), before anything changes.
	GuardNoNulls GuardKind = "no_null_rows"
	// GuardSetting: SQL[0] reads a connection setting, SQL[1] sets it for the
	// phase, SQL[2] restores the value read (substituted for %s) after the
	// phase, whether it succeeded or not.
	GuardSetting GuardKind = "setting"
	// GuardRowsCopied: SQL[0] counts the rows before the phase; the phase's
	// statement SQL[Statement] must write exactly that many.
	GuardRowsCopied GuardKind = "rows_copied"
	// GuardForeignKeys: each SQL statement lists foreign-key violations, one
	// row each; they run before and after the phase's SQL, and the phase
	// fails when there are more after than before.
	GuardForeignKeys GuardKind = "foreign_key_violations_not_increased"
)

// Guard is one check or setting of a phase (Phase.Guards).
type Guard struct {
	Kind GuardKind `json:"kind"`
	SQL  []string  `json:"sql"`
	// Statement is the index in Phase.SQL of the statement a rows_copied
	// guard checks (never 0: the table it copies into is created first).
	Statement int `json:"statement,omitempty"`
	// Column is the column a no_null_rows guard looks in; Names the columns
	// its query returns to name a row by.
	Column string   `json:"column,omitempty"`
	Names  []string `json:"names,omitempty"`
	// Detail says why the guard is there.
	Detail string `json:"detail,omitempty"`
}

// ID names the phase uniquely within a plan: table.name[.object].
func (p Phase) ID() string {
	id := p.Table + "." + p.Name
	if p.Object != "" {
		id += "." + p.Object
	}
	return id
}

// FailpointAfterPhase is the failpoint run right after the phase with this
// ID (Phase.ID) has committed or finished.
func FailpointAfterPhase(id string) string { return "phase." + id + ".done" }

// FailpointCopyBatch runs after each committed batch of a widen_copy or
// rebuild_copy phase.
const FailpointCopyBatch = "widen.copy.batch"

// Phases lists every phase the shape step, then the widen step, would run,
// in order. A table with a refused change has none.
func (p *ShapePlan) Phases() []Phase {
	var shape, widen []Phase
	for _, t := range p.tables {
		if len(t.Refused) > 0 {
			continue
		}
		for _, ph := range t.Phases {
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
func (p *ShapePlan) stepPhases(step string) []Phase {
	var out []Phase
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
		if t.Inflight.any() {
			out = append(out, t.Table+": "+strings.Join(t.Inflight.notes, ", "))
		}
	}
	return out
}
