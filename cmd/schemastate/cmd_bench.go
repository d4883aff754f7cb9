package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/schemastate/schemastate/bench"
	"github.com/schemastate/schemastate/gen"
)

// Exit codes of bench.
const exitBenchFailed = 1 // a measurement could not be taken

func init() {
	register(&command{name: "bench", summary: "generate a reference store and time each operation against a floor on the same data", run: runBench})
}

func runBench(ctx context.Context, e *env, args []string) int {
	fs := flags(e, "bench", "--db DSN [--scale-mb 328] [--population K] [--runs 3] [--frames 1000] [--seed 1] [--json]")
	dsn := dbFlag(fs)
	scale := fs.Float64("scale-mb", gen.ReferenceMB, "store size in MiB (the generator's --scale-mb)")
	population := fs.Float64("population", 0, "subagent population factor (0: scale-mb/328)")
	runs := fs.Int("runs", 3, "repetitions per measurement; medians are reported")
	frames := fs.Int("frames", 1000, "frames per live-capture run")
	seed := fs.Uint64("seed", 1, "generator seed")
	asJSON := fs.Bool("json", false, "print the report as one JSON object and no progress")
	if code, ok := parse(fs, args); !ok {
		return code
	}
	if *scale <= 0 || *runs <= 0 || *frames <= 0 || *population < 0 {
		fmt.Fprintln(e.stderr, "schemastate: --scale-mb, --runs and --frames must be positive")
		return exitUsage
	}
	db, _, ok := openOrCreateDB(ctx, e, *dsn)
	if !ok {
		return exitUsage
	}
	defer db.Close()
	cfg := bench.Config{ScaleMB: *scale, Population: *population, Seed: *seed, Runs: *runs, Frames: *frames}
	if !*asJSON {
		if terminal(e.stderr) {
			cfg.Progress = func(msg string) { fmt.Fprintf(e.stderr, "\r\033[Kbench: %s", msg) }
			defer fmt.Fprint(e.stderr, "\r\033[K")
		}
	}
	rep, err := bench.Run(ctx, db, cfg)
	if errors.Is(err, gen.ErrNotEmpty) {
		fmt.Fprintf(e.stderr, "schemastate: %v (bench generates its own store: point --db at an empty database or schema)\n", err)
		return exitNotEmpty
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "schemastate: bench: %v\n", err)
		return exitBenchFailed
	}
	if *asJSON {
		writeJSON(e.stdout, rep)
		return exitOK
	}
	printBench(e, rep)
	return exitOK
}

func printBench(e *env, r *bench.Report) {
	fmt.Fprintf(e.stdout, "%s, %.0f MiB requested, %.1f MiB on disk: %d messages, %d subagent invocations (generated in %s); median of %d runs\n",
		r.Dialect, r.ScaleMB, float64(r.StoreBytes)/(1<<20), r.Messages, r.Subagents, r.Generate.Round(time.Millisecond), r.Runs)
	fmt.Fprintf(e.stdout, "%-26s %12s %12s %7s %8s %s\n", "measurement", "ours", "floor", "ratio", "target", "met")
	for _, m := range r.Measurements {
		target, met := "-", "-"
		if m.Target > 0 {
			target = fmt.Sprintf("≤%.2f×", m.Target)
		}
		if m.Met != nil {
			met = map[bool]string{true: "met", false: "NOT MET"}[*m.Met]
		}
		fmt.Fprintf(e.stdout, "%-26s %12s %12s %6.2f× %8s %s\n", m.Name, dur(m.Ours), dur(m.Floor), m.Ratio, target, met)
		fmt.Fprintf(e.stdout, "    floor: %s\n", m.FloorIs)
		if m.Detail != "" {
			fmt.Fprintf(e.stdout, "    %s\n", m.Detail)
		}
	}
	if l := r.Lock; l != nil {
		fmt.Fprintf(e.stdout, "postgres ACCESS EXCLUSIVE held: median %s, max %s (poll every %s); concurrent reader worst %s over %d SELECTs (baseline worst %s)\n",
			dur(l.HeldMedian), dur(l.HeldMax), dur(l.PollInterval), dur(l.ReaderWorst), l.ReaderQueries, dur(l.ReaderBaseline))
	}
	mem := r.Memory
	fmt.Fprintf(e.stdout, "reconcile memory (predating store, full backfill): Go heap in use peak %.1f MiB; RSS %.1f MiB before, peak %.1f MiB\n",
		mib(mem.HeapInusePeak), mib(mem.RSSBefore), mib(mem.RSSPeak))
}

func dur(d time.Duration) string {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond).String()
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond).String()
	}
	return d.Round(time.Microsecond).String()
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }
