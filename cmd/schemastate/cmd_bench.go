package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/schemastate/schemastate/internal/perdialect"
	"github.com/schemastate/schemastate/internal/tool/bench"
	"github.com/schemastate/schemastate/internal/tool/bench/render"
	"github.com/schemastate/schemastate/internal/tool/dsn"
	"github.com/schemastate/schemastate/internal/tool/gen"
)

// Exit codes of bench.
const exitBenchFailed = 1 // a measurement could not be taken

func runBench(ctx context.Context, e *env, args []string) int {
	fs, dbArg, asJSON := storeFlags(e, "bench", "[--db DSN] [--rows N,…] [--messages N,…] [--runs N] [--large-runs N] [--frames N] [--only NAME,…] [--pooler URL] [--out DIR] [--json]",
		"print the report as one JSON object and no progress")
	rowsFlag := fs.String("rows", "", "task_session_subagents sizes of the rebuild/steady/capture curves (default 1000,10000,100000,300000,1000000; PostgreSQL also 4000000; 0 for none)")
	msgsFlag := fs.String("messages", "", "task_session_messages sizes of the backfill/health/steady curves (default 100000,600000,2000000; 0 for none)")
	runs := fs.Int("runs", 3, "repetitions per measurement; medians are reported")
	largeRuns := fs.Int("large-runs", 1, "repetitions at a million rows or messages and above")
	frames := fs.Int("frames", 1000, "frames per live-capture run")
	diskMB := fs.Int("disk-mb", 256, "MiB the disk-rate probe writes")
	rowsStore := fs.Float64("rows-store-mb", 16, "size of the rows family's generated store")
	seed := fs.Uint64("seed", 1, "generator seed")
	out := fs.String("out", "", "write report.json, results.csv, the SVG charts and tables.md here (each name starts with the dialect)")
	images := fs.String("images", "bench/", "tables.md links the charts as this prefix + file name (the path from docs/benchmarks.md to --out)")
	renderFrom := fs.String("render", "", "read a report.json an earlier run wrote and write its files into --out again; measures nothing")
	only := fs.String("only", "", "take only these measurements, comma-separated ("+strings.Join(bench.Names(), ", ")+"; default all)")
	poolerArg := fs.String("pooler", "", "PostgreSQL: the same database reached through PgBouncer in transaction mode (no search_path in --db); also measures the boot, the steady-state boot and live capture through it beside direct")
	noCLI := fs.Bool("no-cli", false, "do not time the operations through the CLI")
	if code, ok := parseFlags(e, fs, args); !ok {
		return code
	}
	if *renderFrom != "" {
		return renderBench(e, *renderFrom, *out, *images)
	}
	t, err := dsn.Parse(*dbArg)
	if err != nil {
		return usageError(e, err)
	}
	rows, err1 := sizes(*rowsFlag, bench.DefaultRows)
	msgs, err2 := sizes(*msgsFlag, bench.DefaultMessages)
	if err := errors.Join(err1, err2); err != nil {
		return usageError(e, err)
	}
	var skipped, onlyNames []string
	if *only != "" {
		for _, n := range strings.Split(*only, ",") {
			onlyNames = append(onlyNames, strings.TrimSpace(n))
		}
		if err := bench.CheckOnly(onlyNames); err != nil {
			return usageError(e, err)
		}
		skipped = append(skipped, "every measurement but "+strings.Join(onlyNames, ", ")+" (--only)")
	}
	extraRows := perdialect.Of[[]int]{Postgres: bench.PostgresExtraRows}.Must(t.Dialect)
	if *rowsFlag == "" {
		rows = append(rows, extraRows...)
	}
	if *runs <= 0 || *largeRuns <= 0 || *frames <= 0 || *diskMB <= 0 || *rowsStore <= 0 {
		fmt.Fprintln(e.stderr, "schemastate: --runs, --large-runs, --frames, --disk-mb and --rows-store-mb must be positive")
		return exitUsage
	}
	defRows := append(append([]int(nil), bench.DefaultRows...), extraRows...)
	for _, n := range missing(defRows, rows) {
		skipped = append(skipped, fmt.Sprintf("%d rows (rebuild, steady state, capture): run with --rows %d", n, n))
	}
	for _, n := range missing(bench.DefaultMessages, msgs) {
		skipped = append(skipped, fmt.Sprintf("%d messages (backfill, health, steady state): run with --messages %d", n, n))
	}
	if *noCLI {
		skipped = append(skipped, "the CLI timings (--no-cli)")
	}
	if t.OnServer() {
		// Unreachable is a usage error, as for every command that takes --db;
		// the stores open their own pool.
		db, _, ok := open(ctx, e, *dbArg, create)
		if !ok {
			return exitUsage
		}
		db.Close()
	}
	var poolerDSN string
	if *poolerArg != "" {
		pt, err := dsn.Parse(*poolerArg)
		if pooled := (perdialect.Of[bool]{Postgres: true}); err != nil || !pooled.Must(pt.Dialect) || !pooled.Must(t.Dialect) {
			fmt.Fprintf(e.stderr, "schemastate: --pooler takes a PostgreSQL URL, with a PostgreSQL --db (%v)\n", err)
			return exitUsage
		}
		poolerDSN = pt.DSN
	}
	stores, err := bench.StoresAt(t)
	if err != nil {
		return usageError(e, err)
	}
	defer stores.Close()
	cfg := bench.Config{Rows: rows, Messages: msgs, RowsStoreMB: *rowsStore, Seed: *seed, Runs: *runs, LargeRuns: *largeRuns,
		Frames: *frames, DiskMB: *diskMB, Only: onlyNames, Skipped: skipped, PoolerDSN: poolerDSN}
	if !*noCLI {
		if cfg.Exe, err = os.Executable(); err != nil {
			fmt.Fprintf(e.stderr, "schemastate: bench: cannot find its own binary for the CLI timings (use --no-cli): %v\n", err)
			return exitBenchFailed
		}
	}
	if !*asJSON {
		if terminal(e.stderr) {
			cfg.Progress = func(msg string) { fmt.Fprintf(e.stderr, "\r\033[Kbench: %s", msg) }
			defer fmt.Fprint(e.stderr, "\r\033[K")
		} else {
			// A log (a CI job, nohup): one timestamped line per step, so a
			// run of tens of minutes shows where it is.
			cfg.Progress = func(msg string) { fmt.Fprintf(e.stderr, "%s bench: %s\n", time.Now().UTC().Format(time.TimeOnly), msg) }
		}
	}
	rep, err := bench.Run(ctx, stores, cfg)
	if errors.Is(err, gen.ErrNotEmpty) {
		fmt.Fprintf(e.stderr, "schemastate: %v (bench generates its own stores: point --db at an empty database or schema)\n", err)
		return exitNotEmpty
	}
	if err != nil {
		fail(e, "bench", err)
		return exitBenchFailed
	}
	if *out != "" {
		paths, err := render.WriteFiles(*out, *images, rep)
		if err != nil {
			fmt.Fprintf(e.stderr, "schemastate: bench: %v\n", err)
			return exitBenchFailed
		}
		if !*asJSON {
			fmt.Fprintf(e.stdout, "wrote %s\n", strings.Join(paths, ", "))
		}
	}
	output(e, *asJSON, rep, printBench)
	return exitOK
}

// renderBench rewrites the files of a stored report.
func renderBench(e *env, from, out, images string) int {
	if out == "" {
		fmt.Fprintln(e.stderr, "schemastate: --render needs --out")
		return exitUsage
	}
	b, err := os.ReadFile(from)
	if err != nil {
		fmt.Fprintf(e.stderr, "schemastate: bench: %v\n", err)
		return exitUsage
	}
	var rep render.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		fmt.Fprintf(e.stderr, "schemastate: bench: %s: %v\n", from, err)
		return exitUsage
	}
	paths, err := render.WriteFiles(out, images, &rep)
	if err != nil {
		fmt.Fprintf(e.stderr, "schemastate: bench: %v\n", err)
		return exitBenchFailed
	}
	fmt.Fprintf(e.stdout, "wrote %s\n", strings.Join(paths, ", "))
	return exitOK
}

// missing lists the sizes of def that are not in got.
func missing(def, got []int) []int {
	var out []int
	for _, n := range def {
		found := false
		for _, g := range got {
			found = found || g == n
		}
		if !found {
			out = append(out, n)
		}
	}
	return out
}

// sizes parses a comma-separated list of positive sizes; "" is def, "0" none.
func sizes(s string, def []int) ([]int, error) {
	if s == "" {
		return append([]int(nil), def...), nil
	}
	if s == "0" {
		return nil, nil
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("not a list of positive sizes: %q", s)
		}
		out = append(out, n)
	}
	return out, nil
}

func printBench(e *env, r *render.Report) {
	fmt.Fprintf(e.stdout, "%s, median of %d runs (%d at a million and above)\n", r.Dialect, r.Runs, r.LargeRuns)
	fmt.Fprintf(e.stdout, "%-26s %-8s %9s %12s %12s %7s %s\n", "measurement", "family", "n", "ours", "floor", "ratio", "target")
	for _, m := range r.Measurements {
		target := "-"
		if m.Target > 0 {
			target = map[bool]string{true: "met", false: "NOT MET"}[m.Met != nil && *m.Met]
		}
		fmt.Fprintf(e.stdout, "%-26s %-8s %9d %12s %12s %6.2f× %s\n", m.Name, m.Family, m.N, render.Dur(m.Ours), render.Dur(m.Floor), m.Ratio, target)
		for _, a := range m.Anchors {
			if a.Err != "" {
				fmt.Fprintf(e.stdout, "    %s: failed: %s\n", a.Name, a.Err)
				continue
			}
			fmt.Fprintf(e.stdout, "    %s: %s\n", a.Name, render.Dur(a.Median))
		}
	}
	for _, m := range r.Memory {
		fmt.Fprintf(e.stdout, "memory (%s %d): Go heap peak %.1f MiB; RSS %.1f MiB before, peak %.1f MiB\n",
			m.Family, m.N, mib(m.HeapPeak), mib(m.RSSBefore), mib(m.RSSPeak))
	}
	for _, l := range r.Locks {
		fmt.Fprintf(e.stdout, "postgres ACCESS EXCLUSIVE at %d rows: sighted over %s (first to last poll); concurrent reader worst %s (baseline %s)\n",
			l.Rows, render.Dur(l.Held), render.Dur(l.ReaderWorst), render.Dur(l.ReaderBaseline))
	}
	for _, s := range r.Skipped {
		fmt.Fprintf(e.stdout, "not measured: %s\n", s)
	}
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }
