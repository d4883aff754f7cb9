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

// A boot whose backfill meets one long metadata document has a peak RSS
// bounded by that document's size, in the built CLI's `reconcile`, beyond
// the same boot over a 1 KiB one; over the limit (backfill.MaxMetadata) it
// says, in its report and at WARN, which message it did not parse.
//
// A document under the limit is parsed, 15 MiB here (SCHEMASTATE_TEST_BACKFILL_MB
// sets another size, at most the limit's 16). On PostgreSQL the server reads
// the JSON: the boot's peak does not move (measured 0 MiB at 2, 8 and 15
// MiB; bound 3x). On SQLite the JSON functions run in the boot's process:
// peak RSS beyond the baseline measured 66, 195 and 350 MiB at 2, 8 and 15
// MiB, about 22x the document plus 22 MiB, bound 28x plus 32 MiB. Each
// materialized stage of the scan (msg, then the normalized and the
// subagent_task objects extracted by jsonb_each) holds its JSONB blobs in
// the stage's row, in the record built to store it, in the ephemeral table
// and in the registers reading it back: 36, 92, 164 MiB after each stage for
// an 8 MiB document, 180 after the field reads, 197 for the whole scan
// (in-process VmHWM over each prefix of the statement).
//
// A document over the limit, 24 MiB (SCHEMASTATE_TEST_BACKFILL_OVER_MB), is
// not parsed: on both dialects it costs at most 3x its size (SQLite reads
// its text for the candidate test and its length). Before the limit, a
// 100 MB document took the boot past 2.8 GB on SQLite.
func TestBackfill_HugeMetadataBoundedBootMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the CLI and stores documents of tens of MiB")
	}
	parsed := proctest.SizeMB(t, "SCHEMASTATE_TEST_BACKFILL_MB", 15) << 20
	over := proctest.SizeMB(t, "SCHEMASTATE_TEST_BACKFILL_OVER_MB", 24) << 20
	require.LessOrEqual(t, parsed, backfill.MaxMetadata, "SCHEMASTATE_TEST_BACKFILL_MB: a document the backfill parses")
	require.Greater(t, over, backfill.MaxMetadata, "SCHEMASTATE_TEST_BACKFILL_OVER_MB: a document over the limit")
	bound := map[dialect.Dialect]func(n int) int64{
		dialect.Postgres: func(n int) int64 { return 3 * int64(n) },
		dialect.SQLite:   func(n int) int64 { return 28*int64(n) + 32<<20 },
	}
	bin := proctest.Binary(t)
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		declared(t, db)
		baseline, _ := bootPeak(t, bin, db, "m-small", 1<<10)
		check := func(id string, size int, limit int64) string {
			clearKeys(t, db, keys.CaptureSince, keys.BackfillThrough)
			peak, out := bootPeak(t, bin, db, id, size)
			t.Logf("%s: %.1f MiB document: peak RSS %.1f MiB, %.1f MiB with a 1 KiB one", db.Dialect, float64(size)/(1<<20),
				float64(peak)/(1<<20), float64(baseline)/(1<<20))
			require.Less(t, peak-baseline, limit, "peak RSS of the boot beyond the baseline")
			_, err := db.DB.Exec(db.Q(`DELETE FROM task_session_messages WHERE id = ?`), id)
			require.NoError(t, err)
			return out
		}
		out := check("m-parsed", parsed, bound[db.Dialect](parsed))
		require.Contains(t, out, "backfill         applied     1 stmt  inserted 1 rows;", "the parsed document is a row")
		out = check("m-huge", over, 3*int64(over))
		require.Contains(t, out, "backfill         applied     1 stmt  inserted 0 rows;")
		require.Contains(t, out, "1 candidate messages skipped: metadata longer than 16777216 bytes, not parsed (first: m-huge)")
		require.Contains(t, out, "reconcile: the backfill did not parse metadata longer than its limit", "the WARN")
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
