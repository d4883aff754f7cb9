package reconcile_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/reconcile"
)

// BenchmarkOnlineUpgrade measures the PostgreSQL upgrade of a legacy table
// while the host reads and writes it: ours (the path the live table's size
// chooses: the online phases above WithOnlineAbove), our single-transaction
// path forced (ours_single), ours with the copy never resting between
// batches (ours_nopause), the floor (widening_alter: the one transaction a
// host would write to reach the declared shape — add the execution column,
// widen the three metrics, swap the key) and a second anchor (naive_alter:
// the same ALTER without the widening, essentially one unique-index build).
// A third anchor, key_cic, runs only the key change the online way by hand
// (ADD COLUMN, CREATE UNIQUE INDEX CONCURRENTLY, ADD CONSTRAINT … USING
// INDEX): the waits the server's own index build on the live table causes.
// For each it reports the worst latency of a concurrent reader loop (SELECT
// by session), of an inserting writer loop (single-row INSERTs of new rows)
// and of an updating writer loop (the live capture's merge onto an existing
// row: UPDATE … SET tool_status, model, updated_at), the total time, the
// ACCESS EXCLUSIVE windows polled from pg_locks, the WAL written
// (pg_current_wal_lsn before and after: the whole cluster's, so other
// databases' writes count too), the table's heap and index sizes before and
// after, and the rebuild copy's rows per second.
//
//	SCHEMASTATE_BENCH_ONLINE_ROWS=1000000,4000000 go test ./reconcile -run '^$' -bench OnlineUpgrade -benchtime 1x -timeout 60m
//
// Rows default to 100000 so a plain -bench run stays short.
func BenchmarkOnlineUpgrade(b *testing.B) {
	sizes := []int{100000}
	if v := os.Getenv("SCHEMASTATE_BENCH_ONLINE_ROWS"); v != "" {
		sizes = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			require.NoError(b, err)
			sizes = append(sizes, n)
		}
	}
	modes := []string{"ours", "widening_alter", "naive_alter"}
	if v := os.Getenv("SCHEMASTATE_BENCH_ONLINE_MODES"); v != "" {
		modes = strings.Split(v, ",")
	}
	traffics := []string{"closed"}
	if v := os.Getenv("SCHEMASTATE_BENCH_ONLINE_TRAFFIC"); v != "" {
		traffics = strings.Split(v, ",")
	}
	for _, t := range traffics {
		if _, ok := trafficLoads[t]; !ok {
			b.Fatalf("SCHEMASTATE_BENCH_ONLINE_TRAFFIC: unknown traffic %q (closed, paced or none)", t)
		}
	}
	for _, rows := range sizes {
		for _, traffic := range traffics {
			for _, mode := range modes {
				b.Run(fmt.Sprintf("rows=%d/traffic=%s/%s", rows, traffic, mode), func(b *testing.B) {
					for i := 0; i < b.N; i++ {
						benchUpgrade(b, rows, traffic, mode)
					}
				})
			}
		}
	}
}

// The host's traffic during an upgrade, one of:
//
//	closed  each loop runs its next statement as soon as the last returns:
//	        the reader alone keeps a core busy (a read counts one session's
//	        rows, 5,000 at 1M), which the blocking ALTER gets back for free
//	paced   a fixed offered load, the same for every mode: 50 reads of one
//	        row by id (a read whose own cost stays near a millisecond at any
//	        size, so a wait shows), 100 inserts and 100 updates a second,
//	        each loop falling behind (never bursting) when a statement takes
//	        longer than its period
//	none    no reader or writer, only the pg_locks poller: the upgrade's own
//	        cost against the ALTER's
var trafficLoads = map[string]trafficLoad{
	"closed": {},
	"paced":  {reader: 20 * time.Millisecond, writer: 10 * time.Millisecond, updater: 10 * time.Millisecond, pointReads: true},
	"none":   {idle: true},
}

// trafficLoad is how often each loop starts a statement (0: back to back),
// whether the reader reads one row by id instead of counting a session's,
// and whether the loops run at all (idle: the poller alone).
type trafficLoad struct {
	reader, writer, updater time.Duration
	pointReads, idle        bool
}

func benchUpgrade(b *testing.B, rows int, traffic, mode string) {
	b.StopTimer()
	db := openPostgres(b).Host(b).Legacy(b)
	db.Exec(b, `INSERT INTO task_sessions (id, task_id) SELECT 's' || i, 'k' || i FROM generate_series(1, 200) i`)
	db.Exec(b, fmt.Sprintf(`INSERT INTO task_session_subagents (id, task_session_id, task_id, tool_call_id, subagent_type, is_async, total_tokens, tool_use_count, duration_ms, source, observed_at, updated_at)
 SELECT 'r' || i, 's' || (i %% 200 + 1), 'k' || (i %% 200 + 1), 'toolu_' || i, 'general', 0, i, i %% 50, i %% 100000, 'live',
   timestamp '2026-07-30 00:00:00' + i * interval '1 ms', timestamp '2026-07-30 00:00:00' + i * interval '1 ms'
 FROM generate_series(1, %d) i`, rows))
	db.Exec(b, `ANALYZE task_session_subagents`)
	var size string
	require.NoError(b, db.QueryRow(`SELECT pg_size_pretty(pg_table_size('task_session_subagents'))`).Scan(&size))
	sizes := func() (heap, indexes int64) {
		require.NoError(b, db.QueryRow(`SELECT pg_table_size('task_session_subagents'), pg_indexes_size('task_session_subagents')`).Scan(&heap, &indexes))
		return heap, indexes
	}
	heapBefore, indexesBefore := sizes()
	var walBefore string
	require.NoError(b, db.QueryRow(`SELECT pg_current_wal_lsn()::text`).Scan(&walBefore))

	ctx, cancel := context.WithCancel(context.Background())
	mon := startMonitors(b, ctx, db, rows, trafficLoads[traffic])
	time.Sleep(time.Second) // a baseline for the loops
	start := time.Now()
	b.StartTimer()
	var copyRate float64
	var widenStart time.Time // ours: when the widen step (the rebuild) began
	switch mode {
	case "ours", "ours_single", "ours_nopause":
		var last string
		var copyStart time.Time
		opts := []reconcile.Option{reconcile.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
			reconcile.WithProgress(func(p reconcile.Progress) {
				if p.Step == reconcile.StepWiden && widenStart.IsZero() {
					widenStart = time.Now()
				}
				switch {
				case p.Message == "phase task_session_subagents.rebuild_copy":
					copyStart = time.Now()
				case strings.HasPrefix(p.Message, "copied task_session_subagents: ") && !copyStart.IsZero():
					var n int64
					fmt.Sscanf(strings.TrimPrefix(p.Message, "copied task_session_subagents: "), "%d", &n)
					copyRate = float64(n) / time.Since(copyStart).Seconds()
				}
				if msg := p.Step + ": " + p.Message; !strings.HasPrefix(p.Message, "copying") && !strings.HasPrefix(p.Message, "replaying") && msg != last {
					last = msg
					fmt.Fprintf(os.Stderr, "%8.3fs %s\n", time.Since(start).Seconds(), msg)
				}
			})}
		// The lock budget is raised so a loaded machine's long reads (20,000
		// rows each at 4M) do not fail the run: each attempt still waits at
		// most 50 ms for its lock, so the waits it causes are the default's.
		opts = append(opts, reconcile.WithDDLLockTimeout(60*time.Second))
		if mode == "ours_nopause" {
			opts = append(opts, reconcile.WithCopyPause(0))
		}
		if mode == "ours_single" {
			opts = append(opts, reconcile.WithOnlineAbove(1<<62), reconcile.WithDDLLockTimeout(time.Hour))
		}
		rep, err := reconcile.Reconcile(ctx, db.DB, opts...)
		require.NoError(b, err, describe(rep))
		b.Logf("%s: %s; widen: %s", mode, rep.Step(reconcile.StepShape).Detail, rep.Step(reconcile.StepWiden).Detail)
	case "widening_alter":
		_, err := db.DB.ExecContext(ctx, `ALTER TABLE task_session_subagents DROP CONSTRAINT task_session_subagents_task_session_id_tool_call_id_key,
 ADD COLUMN agent_execution_id text NOT NULL DEFAULT 'unknown',
 ALTER COLUMN total_tokens TYPE bigint, ALTER COLUMN tool_use_count TYPE bigint, ALTER COLUMN duration_ms TYPE bigint,
 ADD CONSTRAINT task_session_subagents_session_execution_tool_call_key UNIQUE (task_session_id, agent_execution_id, tool_call_id)`)
		require.NoError(b, err)
	case "key_cic":
		// The key change alone, the way an operator would run it online by
		// hand: the catalog-only column, the unique index built
		// CONCURRENTLY, the constraint attached to it in one short
		// transaction. No widening, no rebuild: an anchor for the waits
		// the server's own index build causes the writers, not a floor.
		for _, q := range []string{
			`ALTER TABLE task_session_subagents ADD COLUMN agent_execution_id text NOT NULL DEFAULT 'unknown'`,
			`CREATE UNIQUE INDEX CONCURRENTLY task_session_subagents_session_execution_tool_call_key ON task_session_subagents (task_session_id, agent_execution_id, tool_call_id)`,
			`ALTER TABLE task_session_subagents DROP CONSTRAINT task_session_subagents_task_session_id_tool_call_id_key,
 ADD CONSTRAINT task_session_subagents_session_execution_tool_call_key UNIQUE USING INDEX task_session_subagents_session_execution_tool_call_key`,
		} {
			_, err := db.DB.ExecContext(ctx, q)
			require.NoError(b, err)
		}
	case "naive_alter":
		_, err := db.DB.ExecContext(ctx, `ALTER TABLE task_session_subagents DROP CONSTRAINT task_session_subagents_task_session_id_tool_call_id_key,
 ADD COLUMN agent_execution_id text NOT NULL DEFAULT 'unknown',
 ADD CONSTRAINT task_session_subagents_session_execution_tool_call_key UNIQUE (task_session_id, agent_execution_id, tool_call_id)`)
		require.NoError(b, err)
	default:
		b.Fatalf("unknown mode %q", mode)
	}
	b.StopTimer()
	total := time.Since(start)
	var wal int64
	require.NoError(b, db.QueryRow(`SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::bigint`, walBefore).Scan(&wal))
	time.Sleep(500 * time.Millisecond)
	cancel()
	r := mon.wait()
	heapAfter, indexesAfter := sizes()
	// The writers' worst among the statements begun once the widen step
	// began: what the rebuild alone costs them, without the key's build on
	// the live table before it.
	var rebuildWorst time.Duration
	if !widenStart.IsZero() {
		var during []sample
		for _, s := range append(slices.Clone(mon.wl), mon.ul...) {
			if !s.at.Before(widenStart) {
				during = append(during, s)
			}
		}
		rebuildWorst, _, _ = worstAndMedian(during)
		b.ReportMetric(float64(rebuildWorst.Microseconds())/1000, "rebuild_writers_worst_ms")
	}
	b.ReportMetric(float64(r.updaterWorst.Microseconds())/1000, "updater_worst_ms")
	b.ReportMetric(float64(r.updaterBase.Microseconds())/1000, "updater_median_ms")
	b.ReportMetric(float64(wal)/(1<<20), "wal_MiB")
	b.ReportMetric(float64(heapAfter)/(1<<20), "heap_after_MiB")
	b.ReportMetric(float64(indexesAfter)/(1<<20), "indexes_after_MiB")
	b.ReportMetric(copyRate, "copy_rows/s")
	b.ReportMetric(float64(r.readerWorst.Microseconds())/1000, "reader_worst_ms")
	b.ReportMetric(float64(r.writerWorst.Microseconds())/1000, "writer_worst_ms")
	b.ReportMetric(float64(r.readerBase.Microseconds())/1000, "reader_median_ms")
	b.ReportMetric(float64(r.writerBase.Microseconds())/1000, "writer_median_ms")
	b.ReportMetric(total.Seconds(), "total_s")
	b.ReportMetric(float64(r.exclusiveWorst.Microseconds())/1000, "excl_window_max_ms")
	b.ReportMetric(float64(r.exclusiveWindows), "excl_windows")
	b.ReportMetric(float64(r.reads), "reads")
	b.ReportMetric(float64(r.writes), "writes")
	// worst says a loop's worst statement, when it began and its median.
	worst := func(d time.Duration, at time.Time, median time.Duration, n int, what string) string {
		if n == 0 {
			return "no " + what
		}
		return fmt.Sprintf("worst %s at %.3fs (median %s, %d %s)", d, at.Sub(start).Seconds(), median, n, what)
	}
	fmt.Fprintf(os.Stderr, "%s traffic=%s rows=%d (%s): total %s, reader %s, writer %s, ACCESS EXCLUSIVE windows seen %d, longest %s at %.3fs",
		mode, traffic, rows, size, total.Round(time.Millisecond), worst(r.readerWorst, r.readerAt, r.readerBase, r.reads, "reads"),
		worst(r.writerWorst, r.writerAt, r.writerBase, r.writes, "writes"), r.exclusiveWindows, r.exclusiveWorst, r.exclusiveAt.Sub(start).Seconds())
	fmt.Fprintf(os.Stderr, ", updater %s, WAL %.1f MiB, heap %.1f → %.1f MiB, indexes %.1f → %.1f MiB, copy %.0f rows/s\n",
		worst(r.updaterWorst, r.updaterAt, r.updaterBase, r.updates, "updates"), float64(wal)/(1<<20),
		float64(heapBefore)/(1<<20), float64(heapAfter)/(1<<20), float64(indexesBefore)/(1<<20), float64(indexesAfter)/(1<<20), copyRate)
	if !widenStart.IsZero() {
		fmt.Fprintf(os.Stderr, "  writer/updater worst among statements begun after the widen step began (%.3fs): %s\n", widenStart.Sub(start).Seconds(), rebuildWorst)
	}
	fmt.Fprintf(os.Stderr, "  reader/writer/updater statements running > 50 ms, by what they waited on (2 ms polls): %v\n\n", r.waits)
}

type monitorResult struct {
	readerWorst, writerWorst, readerBase, writerBase time.Duration
	updaterWorst, updaterBase                        time.Duration
	readerAt, writerAt, updaterAt, exclusiveAt       time.Time // when each worst began
	reads, writes, updates                           int
	exclusiveWindows                                 int
	exclusiveWorst                                   time.Duration
	// waits counts what the reader's and writer's backends were waiting on
	// (pg_stat_activity wait_event_type:wait_event) in polls that found
	// their statement running for more than 50 ms.
	waits map[string]int
}

type monitors struct {
	wg  sync.WaitGroup
	mu  sync.Mutex
	res monitorResult
	rl  []sample
	wl  []sample
	ul  []sample
}

type sample struct {
	at time.Time
	d  time.Duration
}

// startMonitors runs, each on its own connection, a reader loop, an
// inserting writer loop, an updating writer loop (over the rows seeded r1 …
// r<rows>), each starting a statement at most once its period in load, and
// a pg_locks poller (every 2 ms) until ctx ends; with load idle, the poller
// alone.
func startMonitors(b *testing.B, ctx context.Context, db *dbtest.DB, rows int, load trafficLoad) *monitors {
	m := &monitors{}
	open := func() *sql.DB {
		d, err := sql.Open("pgx", db.DSN)
		require.NoError(b, err)
		d.SetMaxOpenConns(1)
		b.Cleanup(func() { d.Close() })
		require.NoError(b, d.Ping())
		return d
	}
	reader, writer, updater, poller := open(), open(), open(), open()
	pid := func(d *sql.DB) int {
		var p int
		require.NoError(b, d.QueryRow(`SELECT pg_backend_pid()`).Scan(&p))
		return p
	}
	m.res.waits = map[string]int{}
	readerPID, writerPID, updaterPID := pid(reader), pid(writer), pid(updater)
	var seq atomic.Int64
	loop := func(period time.Duration, run func(i int) error, into *[]sample) {
		if load.idle {
			return
		}
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			next := time.Now()
			for i := 0; ctx.Err() == nil; i++ {
				if wait := time.Until(next); wait > 0 {
					select {
					case <-ctx.Done():
						return
					case <-time.After(wait):
					}
				}
				t0 := time.Now()
				next = t0.Add(period)
				if err := run(i); err != nil {
					if ctx.Err() == nil {
						b.Errorf("monitor: %v", err)
					}
					return
				}
				d := time.Since(t0)
				m.mu.Lock()
				*into = append(*into, sample{t0, d})
				m.mu.Unlock()
			}
		}()
	}
	loop(load.reader, func(i int) error {
		var n int
		if load.pointReads {
			return reader.QueryRowContext(context.Background(), `SELECT count(*) FROM task_session_subagents WHERE id = $1`, fmt.Sprintf("r%d", (i*7907)%max(rows, 1)+1)).Scan(&n)
		}
		return reader.QueryRowContext(context.Background(), `SELECT count(*) FROM task_session_subagents WHERE task_session_id = $1`, fmt.Sprintf("s%d", i%200+1)).Scan(&n)
	}, &m.rl)
	loop(load.writer, func(i int) error {
		id := fmt.Sprintf("w%d", seq.Add(1))
		_, err := writer.ExecContext(context.Background(), `INSERT INTO task_session_subagents (id, task_session_id, task_id, turn_id, tool_call_id, source, observed_at, updated_at) VALUES ($1, 's1', 'k1', $1, $1, 'live', now(), now())`, id)
		return err
	}, &m.wl)
	loop(load.updater, func(i int) error {
		// A prime stride, so successive updates land on rows far apart.
		id := fmt.Sprintf("r%d", (i*7919)%max(rows, 1)+1)
		_, err := updater.ExecContext(context.Background(), `UPDATE task_session_subagents SET tool_status = 'running', model = $2, updated_at = now() WHERE id = $1`, id, fmt.Sprintf("m%d", i))
		return err
	}, &m.ul)
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		var since time.Time
		for ctx.Err() == nil {
			var held bool
			var slow string
			err := poller.QueryRowContext(context.Background(), `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE relation = to_regclass($1) AND mode = 'AccessExclusiveLock' AND granted),
  array_to_string(ARRAY(SELECT CASE pid WHEN $2 THEN 'reader ' WHEN $3 THEN 'writer ' ELSE 'updater ' END || coalesce(wait_event_type || ':' || wait_event, 'on CPU')
        FROM pg_stat_activity WHERE pid IN ($2, $3, $4) AND state = 'active' AND now() - query_start > interval '50 ms'), ',')`,
				db.Schema+".task_session_subagents", readerPID, writerPID, updaterPID).Scan(&held, &slow)
			if err != nil {
				continue
			}
			m.mu.Lock()
			for _, w := range strings.Split(slow, ",") {
				if w != "" {
					m.res.waits[w]++
				}
			}
			m.mu.Unlock()
			now := time.Now()
			switch {
			case held && since.IsZero():
				since = now
			case !held && !since.IsZero():
				m.mu.Lock()
				m.res.exclusiveWindows++
				if now.Sub(since) > m.res.exclusiveWorst {
					m.res.exclusiveWorst, m.res.exclusiveAt = now.Sub(since), since
				}
				m.mu.Unlock()
				since = time.Time{}
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	return m
}

func (m *monitors) wait() monitorResult {
	m.wg.Wait()
	m.res.reads, m.res.writes, m.res.updates = len(m.rl), len(m.wl), len(m.ul)
	m.res.updaterWorst, m.res.updaterAt, m.res.updaterBase = worstAndMedian(m.ul)
	m.res.readerWorst, m.res.readerAt, m.res.readerBase = worstAndMedian(m.rl)
	m.res.writerWorst, m.res.writerAt, m.res.writerBase = worstAndMedian(m.wl)
	return m.res
}

func worstAndMedian(ss []sample) (time.Duration, time.Time, time.Duration) {
	if len(ss) == 0 {
		return 0, time.Time{}, 0
	}
	ds := make([]time.Duration, len(ss))
	worst := ss[0]
	for i, s := range ss {
		ds[i] = s.d
		if s.d > worst.d {
			worst = s
		}
	}
	slices.Sort(ds)
	return worst.d, worst.at, ds[len(ds)/2]
}
