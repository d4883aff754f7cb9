package main

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/internal/testkit/proctest"
)

// A 60 MB line (a well-formed frame that the default 16 MiB limit refuses)
// is reported with its number and length while the built CLI's peak RSS, read
// from the child's rusage, stays under 64 MiB; the frames after it persist.
// Before the limit, ingest held the whole line and parsed it: about three
// times its size.
func TestIngest_SixtyMBLineBoundedMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the CLI and writes a 60 MB file")
	}
	bin := cliBinary(t)
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		sessionStore(t, db, map[string]string{"s1": "t1"})
		path := tempPath(t, "frames.ndjson")
		f, err := os.Create(path)
		require.NoError(t, err)
		w := bufio.NewWriter(f)
		frame := func(tc, desc string) string {
			return `{"session_id":"s1","task_id":"t1","tool_call_id":"` + tc + `","subagent_task":{"description":"` + desc + `"}}` + "\n"
		}
		_, _ = w.WriteString(frame("before", "first"))
		head := `{"session_id":"s1","task_id":"t1","tool_call_id":"huge","subagent_task":{"description":"`
		_, _ = w.WriteString(head)
		chunk := strings.Repeat("y", 1<<20)
		for range 60 {
			_, _ = w.WriteString(chunk)
		}
		_, _ = w.WriteString(`"}}` + "\n")
		hugeLen := len(head) + 60<<20 + 3
		for _, tc := range []string{"after-1", "after-2"} {
			_, _ = w.WriteString(frame(tc, "later"))
		}
		require.NoError(t, w.Flush())
		require.NoError(t, f.Close())

		_, err = proctest.ResetPeak()
		require.NoError(t, err)
		res, err := proctest.Run(bin, nil, "ingest", "--db", db.CLIDSN, path)
		require.NoError(t, err)
		require.Equal(t, exitIngestMalformed, res.Code, res.Stderr)
		require.Contains(t, res.Stderr, path+":2: malformed frame, skipped: line of "+strconv.Itoa(hugeLen)+" bytes is longer than the maximum line length (16777216 bytes)")
		require.Less(t, len(res.Stderr), 1024, res.Stderr)

		peak, ok := proctest.PeakRSS(res.State)
		require.True(t, ok)
		t.Logf("peak RSS %.1f MiB", float64(peak)/(1<<20))
		require.Less(t, peak, int64(64<<20), "peak RSS of the child")

		var n int
		require.NoError(t, db.DB.QueryRow(`SELECT COUNT(*) FROM task_session_subagents WHERE tool_call_id IN ('before', 'after-1', 'after-2')`).Scan(&n))
		require.Equal(t, 3, n)
		require.NoError(t, db.DB.QueryRow(`SELECT COUNT(*) FROM task_session_subagents WHERE tool_call_id = 'huge'`).Scan(&n))
		require.Zero(t, n)
	})
}
