package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/schemastate/schemastate/capture"
	"github.com/schemastate/schemastate/internal/tool/ctxio"
)

// Exit codes of `schemastate ingest`.
const (
	exitIngestMalformed = 1 // every valid line recorded; at least one line was malformed
)

// runIngest feeds frames through capture.Writer exactly as the live path
// does. Exit 0: every line parsed. 1: some line was malformed — not JSON, a
// stored text holding a NUL or bytes that are not UTF-8, longer than
// --max-line — (reported on stderr with its number; nothing else is lost). 2: usage, an unreachable
// database, a table not in its declared shape, a failed write, or a read error.
func runIngest(ctx context.Context, e *env, args []string) int {
	fs, db, asJSON := storeFlags(e, "ingest", "[--db DSN] [--json] [--max-line BYTES] [FILE|-]", "print the counters as one JSON object on stdout")
	maxLine := fs.Int("max-line", capture.DefaultMaxLine, "longest line read as a frame, in bytes; a longer one is skipped and reported malformed")
	if code, ok := parseArgs(e, fs, args, 1, "one FILE (or - for stdin)"); !ok {
		return code
	}
	if *maxLine <= 0 {
		fmt.Fprintf(e.stderr, "schemastate ingest: --max-line %d: must be positive\n", *maxLine)
		return exitUsage
	}
	in, name := e.stdin, "stdin"
	if p := fs.Arg(0); p != "" && p != "-" {
		f, err := openInput(ctx, p)
		if err != nil {
			fmt.Fprintf(e.stderr, "schemastate ingest: %v\n", err)
			return exitUsage
		}
		defer f.Close()
		in, name = f, p
	}

	conn, target, ok := open(ctx, e, *db, readWrite)
	if !ok {
		return exitUsage
	}
	defer conn.Close()
	w, err := capture.NewWriter(ctx, conn, target.Dialect, capture.WithLogger(e.logger))
	if err != nil {
		fmt.Fprintf(e.stderr, "schemastate ingest: %s on %s is not in its declared shape, or not in one this release's writer can write: the writer refuses to start and no frame was attempted: %v\n", capture.Table, target.Display, err)
		fmt.Fprintf(e.stderr, "run 'schemastate reconcile --db …' first, or see 'schemastate lint' for a declaration this writer cannot write\n")
		return exitUsage
	}
	defer w.Close()

	// SIGTERM or SIGINT (ctx) ends the reading at once, even of input that
	// never ends (/dev/zero) or a pipe nobody writes to; the frames already
	// recorded stay recorded.
	res, err := w.Ingest(ctx, ctxio.NewReader(ctx, in), func(m capture.Malformed) {
		fmt.Fprintf(e.stderr, "%s:%d: malformed frame, skipped: %s\n", name, m.Line, m.Reason)
	}, capture.WithMaxLine(*maxLine))
	printIngestSummary(e, res, *asJSON)
	switch {
	case err != nil && errors.Is(err, context.Canceled):
		fmt.Fprintln(e.stderr, "schemastate ingest: interrupted")
		return exitUsage
	case err != nil:
		fmt.Fprintf(e.stderr, "schemastate ingest: %v\n", err)
		return exitUsage
	case res.Counters.Failed > 0:
		fmt.Fprintf(e.stderr, "schemastate ingest: %d frame(s) failed to write (see WARN lines)\n", res.Counters.Failed)
		return exitUsage
	case res.Malformed > 0:
		return exitIngestMalformed
	}
	return exitOK
}

// openInput opens path for reading, giving up when ctx ends first: opening a
// FIFO waits for its writer.
func openInput(ctx context.Context, path string) (*os.File, error) {
	type opened struct {
		f   *os.File
		err error
	}
	done := make(chan opened, 1)
	go func() {
		f, err := os.Open(path)
		done <- opened{f, err}
	}()
	select {
	case o := <-done:
		return o.f, o.err
	case <-ctx.Done():
		go func() {
			if o := <-done; o.f != nil {
				o.f.Close()
			}
		}()
		return nil, fmt.Errorf("open %s: %w", path, context.Cause(ctx))
	}
}

// ingestSummary is what ingest prints: the seven writer counters and the
// malformed-line count.
type ingestSummary struct {
	capture.Counters
	Malformed int `json:"malformed"`
}

func printIngestSummary(e *env, res capture.IngestResult, asJSON bool) {
	s := ingestSummary{Counters: res.Counters, Malformed: res.Malformed}
	if asJSON {
		writeJSON(e.stdout, s)
		return
	}
	out := e.stdout
	row := func(w io.Writer, k string, v int64) { fmt.Fprintf(w, "%-20s %d\n", k, v) }
	row(out, "attempted", s.Attempted)
	row(out, "persisted", s.Persisted)
	row(out, "skipped_no_identity", s.SkippedNoIdentity)
	row(out, "failed", s.Failed)
	row(out, "anomalous_value", s.AnomalousValue)
	row(out, "unstorable_text", s.UnstorableText)
	row(out, "unknown_execution", s.UnknownExecution)
	row(out, "retried", s.Retried)
	row(out, "malformed", int64(s.Malformed))
}
