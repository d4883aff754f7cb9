package hooks

// Failpoints a test (or an operator reproducing a fault) can hook with
// the reconcile's failpoint hook (Hooks.Failpoint). Returning an error there fails the step exactly as a
// database error would.
const (
	// FailpointShapeApplied runs after the shape statements, before the step commits.
	FailpointShapeApplied = "shape.applied"
	// FailpointRebuildCopied runs inside a SQLite rebuild, after the rows are
	// copied into the new table (and their count checked, GuardRowsCopied)
	// and before the old one is dropped.
	FailpointRebuildCopied = "shape.rebuild_copied"
	// FailpointExecutionSinceObserve runs as the execution_since step begins
	// observing the end state, before it reads the live schema.
	FailpointExecutionSinceObserve = "execution_since.observe"
	// FailpointExecutionSinceWrite runs just before the execution_since key write.
	FailpointExecutionSinceWrite = "execution_since.write"
	// FailpointBackfillMaxTaken runs after backfill_through is computed, before the INSERT.
	FailpointBackfillMaxTaken = "backfill.max_taken"
	// FailpointBackfillInserted runs after the backfill INSERT, before capture_since is sampled.
	FailpointBackfillInserted = "backfill.inserted"
	// FailpointBackfillFirstKeyWritten runs between the two backfill key writes.
	FailpointBackfillFirstKeyWritten = "backfill.first_key_written"
)

// FailpointAfterPhase is the failpoint run right after the phase with this
// ID (Phase.ID) has committed or finished.
func FailpointAfterPhase(id string) string { return "phase." + id + ".done" }

// FailpointPhaseHeld runs inside the transaction of the phase with this ID,
// once its SQL ran and before it commits (a statements or own_transaction
// phase): the locks the phase takes are held then, for a test to read from
// pg_locks.
func FailpointPhaseHeld(id string) string { return "held." + id }

// FailpointCopyBatch runs after each committed batch of a widen_copy or
// rebuild_copy phase.
const FailpointCopyBatch = "widen.copy.batch"

// FailpointReplayBatch runs after each committed batch of a rebuild_replay
// phase (FailpointCopyBatch after each batch of rebuild_copy).
const FailpointReplayBatch = "widen.replay.batch"

// FailpointRebuildIndexBuilt runs after each committed index build of the
// rebuild_index phase.
const FailpointRebuildIndexBuilt = "widen.rebuild_index.built"

// FailpointSettingRestore runs as the reconcile gives a connection setting
// back its value, named by the statement that reads it ("PRAGMA
// foreign_keys"): an error there is the restore failing, and the setting
// keeps the reconcile's value.
func FailpointSettingRestore(read string) string { return "restore." + read }
