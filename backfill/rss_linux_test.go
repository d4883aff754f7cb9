package backfill_test

import (
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/backfill"
	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/instant"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/internal/testkit/proctest"
	"github.com/schemastate/schemastate/keys"
)

// A boot whose backfill meets one huge metadata document takes, in the
// built CLI's `reconcile`, at most three times that document's size in peak
// RSS beyond the same boot over a small one, and says, in its report and at
// WARN, which message it did not parse. The document is 24 MiB here; SCHEMASTATE_TEST_BACKFILL_MB sets
// another size (100 for the 100 MB document). Before the limit, a 100 MB
// document took the boot past 2.8 GB on SQLite.
func TestBackfill_HugeMetadataBoundedBootMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the CLI and stores a document of tens of MiB")
	}
	mb := proctest.SizeMB(t, "SCHEMASTATE_TEST_BACKFILL_MB", 24)
	size := mb << 20
	bin := proctest.Binary(t)
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		declared(t, db)
		baseline, _ := bootPeak(t, bin, db, "m-small", 1<<10)
		clearKeys(t, db, keys.CaptureSince, keys.BackfillThrough)
		peak, out := bootPeak(t, bin, db, "m-huge", size)
		t.Logf("%s: %d MiB document: peak RSS %.1f MiB, %.1f MiB with a 1 KiB one", db.Dialect, mb,
			float64(peak)/(1<<20), float64(baseline)/(1<<20))
		require.Less(t, peak-baseline, int64(3*size), "peak RSS of the boot beyond the baseline")
		if size > backfill.MaxMetadata {
			require.Contains(t, out, "backfill         applied     1 stmt  inserted 0 rows;")
			require.Contains(t, out, "1 candidate messages skipped: metadata longer than 16777216 bytes, not parsed (first: m-huge)")
			require.Contains(t, out, "reconcile: the backfill did not parse metadata longer than its limit", "the WARN")
		}
	})
}

// bootPeak stores one candidate message whose metadata is n bytes long, a
// subagent_task with a long result, runs the CLI's reconcile over db and
// returns its peak RSS and its output.
func bootPeak(t *testing.T, bin string, db *dbtest.DB, id string, n int) (int64, string) {
	t.Helper()
	head := `{"tool_call_id":"tc-` + id + `","status":"completed","normalized":{"kind":"subagent_task","subagent_task":{"description":"d","result":"`
	tail := `"}}}`
	fill := map[dialect.Dialect]string{dialect.Postgres: `repeat('y', ?)`, dialect.SQLite: `printf('%.*c', ?, 'y')`}[db.Dialect]
	_, err := db.DB.Exec(db.Q(`INSERT INTO task_sessions (id, task_id) VALUES ('s1', 'task-1') ON CONFLICT (id) DO NOTHING`))
	require.NoError(t, err)
	_, err = db.DB.Exec(db.Q(`INSERT INTO task_session_messages (id, task_session_id, task_id, turn_id, content, type, metadata, created_at, updated_at)
		VALUES (?, 's1', 'task-1', 't', '', 'tool_call', ? || `+fill+` || ?, ?, ?)`),
		id, head, n-len(head)-len(tail), tail, instant.RowTime(db.Dialect, base), instant.RowTime(db.Dialect, base))
	require.NoError(t, err)
	var stored int
	require.NoError(t, db.DB.QueryRow(db.Q(`SELECT octet_length(metadata) FROM task_session_messages WHERE id = ?`), id).Scan(&stored))
	require.Equal(t, n, stored)

	cmd := exec.Command(bin, "reconcile", "--db", db.CLIDSN)
	var out proctest.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	peak := make(chan int64)
	go func() { peak <- watchPeak(cmd.Process.Pid) }()
	require.NoError(t, cmd.Wait(), out.String())
	return <-peak, out.String()
}
