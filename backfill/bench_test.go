package backfill_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/keys"
)

// BenchmarkBackfill times one full backfill (guard, MAX, INSERT … SELECT, key
// writes) over a message history of benchMessages rows, 1 in 100 of them a
// subagent_task (the reference store's proportion is far lower), and 1 in
// 1000 with malformed metadata. Each iteration starts from "not yet run".
//
//	go test -run '^$' -bench Backfill -benchtime 3x ./backfill
const benchMessages = 100000

func BenchmarkBackfill(b *testing.B) {
	for _, d := range []dialect.Dialect{dialect.SQLite, dialect.Postgres} {
		b.Run(string(d), func(b *testing.B) {
			db := dbtest.Open(b, d)
			declared(b, db)
			_, err := db.DB.Exec(`INSERT INTO task_sessions (id, task_id) VALUES ('s1', 'k1')`)
			require.NoError(b, err)
			meta := `CASE WHEN n % 100 = 0 THEN '{"tool_call_id":"toolu_' || n || '","status":"completed","normalized":{"kind":"subagent_task","subagent_task":{"status":"completed","model":"m","total_tokens":1234,"tool_use_count":3,"duration_ms":5000}}}'
				WHEN n % 1000 = 1 THEN '{bad' ELSE '{"type":"message","text":"an ordinary message of ordinary length, written by the agent"}' END`
			var gen string
			if d == dialect.SQLite {
				gen = fmt.Sprintf(`WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < %d)
					INSERT INTO task_session_messages (id, task_session_id, task_id, turn_id, content, metadata, created_at, updated_at)
					SELECT 'm' || n, 's1', 'k1', 't', 'x', %s, '2026-07-30 01:39:37.271235+00:00', '2026-07-30 01:39:37.271235+00:00' FROM g`, benchMessages, meta)
			} else {
				gen = fmt.Sprintf(`INSERT INTO task_session_messages (id, task_session_id, task_id, turn_id, content, metadata, created_at, updated_at)
					SELECT 'm' || n, 's1', 'k1', 't', 'x', %s, TIMESTAMP '2026-07-30 01:39:37.271235', TIMESTAMP '2026-07-30 01:39:37.271235'
					FROM generate_series(1, %d) AS g(n)`, meta, benchMessages)
			}
			_, err = db.DB.Exec(gen)
			require.NoError(b, err)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				_, err := db.DB.Exec(`DELETE FROM task_session_subagents`)
				require.NoError(b, err)
				_, err = db.DB.Exec(db.Q(`DELETE FROM kandev_meta WHERE key IN (?, ?)`), keys.CaptureSince, keys.BackfillThrough)
				require.NoError(b, err)
				b.StartTimer()
				res := mustRun(b, db)
				require.EqualValues(b, benchMessages/100, res.Inserted)
			}
		})
	}
}
