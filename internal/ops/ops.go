// Package ops is the reconcile's operation vocabulary: a plan is a list of
// typed phases (Phase), each saying how the applier runs it (Kind), the lock
// it takes (LockClass) and the checks around it (Guard). The reconcile plans
// and applies them; lint, plan --json and the benchmarks read them. Nothing
// here touches a database.
package ops

import "ariga.io/atlas/sql/schema"

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
	// LockShareRowExclusive is what adding a foreign key takes, on the table
	// and on the table it references: writers wait, readers proceed. Held
	// for a catalog change only (NOT VALID), under the DDL lock attempt.
	LockShareRowExclusive LockClass = "share_row_exclusive_catalog"
	// LockShareUpdateExclusive is what CREATE/DROP INDEX CONCURRENTLY and
	// VALIDATE CONSTRAINT take: readers and writers proceed.
	LockShareUpdateExclusive LockClass = "share_update_exclusive"
	// LockRows is row locks only: the batched copy's short UPDATEs.
	LockRows LockClass = "row_exclusive"
	// LockNone is no lock a host's reader or writer waits on: the rebuild's
	// copy and replay read the live table (ACCESS SHARE) and write only the
	// rebuild's private tables; its index builds lock only those.
	LockNone LockClass = "none"
)

// Kind says how the applier runs a phase: the one thing it dispatches on.
// A phase's name says what it is for; its kind says how it runs.
type Kind string

const (
	// KindStatements runs SQL in one transaction scope, grouped with the
	// statements phases around it (the single-transaction path, a swap).
	KindStatements Kind = "statements"
	// KindOwnTx runs SQL in a transaction of its own, never grouped: a
	// VALIDATE CONSTRAINT, whose scan must not run under the exclusive lock
	// a neighbouring phase took. Cleanup runs when it fails.
	KindOwnTx Kind = "own_transaction"
	// KindConcurrent runs SQL statement by statement outside a transaction,
	// each wait bounded (CREATE/DROP INDEX CONCURRENTLY).
	KindConcurrent Kind = "concurrent"
	// KindBatched runs SQL[0], an UPDATE over the page range ($1, $2), in
	// short transactions until the table's pages at the start are covered,
	// then checks DoneWhen.
	KindBatched Kind = "batched"
	// KindCheckRows runs Breaking, a plain read: rows breaking the constraint a
	// later phase adds. Any row fails the phase, naming the table, the
	// constraint, how many and a few of their keys, before anything is added.
	KindCheckRows Kind = "check_rows"
	// KindRebuildCopy, KindRebuildReplay and KindRebuildIndex are the
	// shadow-table rebuild's loops (postgres_rebuild.go).
	KindRebuildCopy   Kind = "rebuild_copy"
	KindRebuildReplay Kind = "rebuild_replay"
	KindRebuildIndex  Kind = "rebuild_index"
)

// Kinds lists every Kind, for what must cover each of them (the planted-twin
// test of reconcile requires a row per kind).
var Kinds = []Kind{KindStatements, KindOwnTx, KindConcurrent, KindBatched, KindCheckRows, KindRebuildCopy, KindRebuildReplay, KindRebuildIndex}

// Phase names.
const (
	PhaseCreate        = "create"         // CREATE TABLE and its indexes
	PhaseAlter         = "alter"          // one transaction of ALTERs (the small-table path, or the catalog-only changes)
	PhaseRebuild       = "rebuild"        // SQLite's copy path
	PhaseBuildIndex    = "build_index"    // CREATE [UNIQUE] INDEX CONCURRENTLY, outside a transaction
	PhaseSwapKey       = "swap_key"       // DROP CONSTRAINT <old>, ADD CONSTRAINT … UNIQUE USING INDEX
	PhaseDropIndex     = "drop_index"     // DROP INDEX CONCURRENTLY
	PhaseSwapIndex     = "swap_index"     // an index redefined under its name: the old one dropped, the one built beside it renamed in
	PhaseWiden         = "widen"          // ALTER COLUMN … TYPE in one transaction
	PhaseWidenExpand   = "widen_expand"   // shadow columns and the trigger that keeps them equal
	PhaseWidenCopy     = "widen_copy"     // batched copy into the shadow columns
	PhaseWidenContract = "widen_contract" // drop the old columns, rename the shadows in their place

	// The online recipes for constraints and defaults (postgres_recipes.go).
	PhaseCheckRows   = "check_rows"    // a read: the rows that would break the constraint
	PhaseAddNotValid = "add_not_valid" // ADD CONSTRAINT … NOT VALID: enforced on new writes at once
	PhaseValidate    = "validate"      // VALIDATE CONSTRAINT, in a transaction of its own
	PhaseSetNotNull  = "set_not_null"  // SET NOT NULL, proved by the validated check, which is then dropped
	PhaseAddColumn   = "add_column"    // ADD COLUMN nullable with no default, then SET DEFAULT
	PhaseFill        = "fill"          // the existing rows given the column's default, in batches
	PhaseFilled      = "filled"        // the fill's marker comment replaced by the declared comment

	// The shadow-table rebuild (postgres_rebuild.go).
	PhaseRebuildAbandon = "rebuild_abandon" // drop a rebuild's artefacts, to start again or take the column copy
	PhaseRebuildPrepare = "rebuild_prepare" // the new table, the changed-id log and its trigger, the state row
	PhaseRebuildCopy    = "rebuild_copy"    // INSERT … SELECT into the new table by ctid range, in batches
	PhaseRebuildReplay  = "rebuild_replay"  // the logged ids deleted from the new table and copied again
	PhaseRebuildIndex   = "rebuild_index"   // CREATE INDEX on the new, private table
	PhaseRebuildSwap    = "rebuild_swap"    // replay the rest under the table's lock, drop it, rename the new one in
	PhaseRebuildFinish  = "rebuild_finish"  // VALIDATE the carried foreign keys, drop the state
)

// Phase is one unit of a plan.
type Phase struct {
	// Step is the reconcile step that runs the phase: shape or widen.
	Step string `json:"step"`
	Name string `json:"name"`
	// Kind is how the applier runs the phase (Kind).
	Kind  Kind   `json:"kind"`
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
	// Breaking is a check_rows phase's read (and a validate phase's, when it
	// fails): it counts the rows that would break Constraint and lists up to
	// five of their keys, one scan of the table when none does.
	Breaking   *Breaking `json:"breaking,omitempty"`
	Constraint string    `json:"constraint,omitempty"`
	// Loop names each statement of a looping phase by its role, for the
	// runner of its kind (SQL lists the same statements, in order, for plan
	// and the exec hook).
	Loop *Loop `json:"loop,omitempty"`
	// Scans says the phase's time grows with the table's rows (a scan, a
	// copy, a build), whatever lock it takes.
	Scans bool `json:"scans"`
	// HostWaits says what the host's readers and writers wait on while the
	// phase runs (HostWaits), as plan --json prints it.
	HostWaits string `json:"host_waits"`
}

// Breaking is the read of the rows that would break a constraint: Sample
// returns up to five of their keys, one a row; Count, run only when Sample
// found any, how many there are.
type Breaking struct {
	Sample string `json:"sample"`
	Count  string `json:"count"`
}

// Loop is a looping phase's statements by their role.
type Loop struct {
	// Batch runs over the page range ($1, $2): a batched phase's UPDATE, a
	// rebuild copy's INSERT … SELECT.
	Batch string `json:"batch,omitempty"`
	// Progress records a rebuild copy's next page ($1) and rows copied ($2)
	// in the batch's transaction.
	Progress string `json:"progress,omitempty"`
	// Bound reads the last log entry of a replay's next chunk; Delete and
	// Copy replay the chunk up to it ($1); Forget drops it from the log.
	Bound  string `json:"bound,omitempty"`
	Delete string `json:"delete,omitempty"`
	Copy   string `json:"copy,omitempty"`
	Forget string `json:"forget,omitempty"`
	// Builds are a rebuild_index phase's index builds; Analyze runs once
	// they are built.
	Builds  []string `json:"builds,omitempty"`
	Analyze string   `json:"analyze,omitempty"`
}

// WithSQL sets the guard's SQL: its statements, in the order they run.
func (g Guard) WithSQL() Guard {
	g.SQL = nil
	for _, s := range append([]string{g.Query, g.Read, g.Set, g.Restore, g.Count}, g.Queries...) {
		if s != "" {
			g.SQL = append(g.SQL, s)
		}
	}
	return g
}

// GuardKind says what a guard checks or sets, and so how the applier runs it.
type GuardKind string

const (
	// GuardNoNulls: Query returns a row holding NULL in Column, which the
	// phase makes NOT NULL with nothing to fill it with, so the row could
	// not be kept: any row fails the phase (ErrNullRow), naming it by Names
	// (the query's columns), before anything changes.
	GuardNoNulls GuardKind = "no_null_rows"
	// GuardSetting: Read reads a connection setting, Set sets it for the
	// phase, Restore restores the value read (substituted for %s) after the
	// phase, whether it succeeded or not.
	GuardSetting GuardKind = "setting"
	// GuardRowsCopied: Count counts the rows before the phase; the phase's
	// statement Copy must write exactly that many.
	GuardRowsCopied GuardKind = "rows_copied"
	// GuardForeignKeys: each of Queries lists foreign-key violations, one
	// row each; they run before and after the phase's SQL, and the phase
	// fails when there are more after than before.
	GuardForeignKeys GuardKind = "foreign_key_violations_not_increased"
)

// Guard is one check or setting of a phase (Phase.Guards). Its statements
// are named by their role (the fields of its kind); SQL lists them, for plan.
type Guard struct {
	Kind GuardKind `json:"kind"`
	SQL  []string  `json:"sql"`
	// Query is a no_null_rows guard's read; Queries a foreign-key guard's.
	Query   string   `json:"query,omitempty"`
	Queries []string `json:"queries,omitempty"`
	// Read, Set and Restore are a setting guard's.
	Read    string `json:"read,omitempty"`
	Set     string `json:"set,omitempty"`
	Restore string `json:"restore,omitempty"`
	// Count is a rows_copied guard's count before the phase; Copy the
	// phase's statement whose rows it checks.
	Count string `json:"count,omitempty"`
	Copy  string `json:"copy,omitempty"`
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

// TableChanges is one owned table's diff as the shape step planned it.
type TableChanges struct {
	Table string
	// Live is the table as inspected (nil when it does not exist yet);
	// Want as declared.
	Live, Want *schema.Table
	// Changes are Atlas's changes from Live to Want, the undeclared objects
	// kept out of them, before they are split into phases.
	Changes []schema.Change
	// Refused names each change the shape step refuses (reconcile.ShapePlan.Refused).
	Refused []string
}
