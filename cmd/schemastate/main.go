// Command schemastate reconciles, inspects and feeds the subagent-context
// store on SQLite (an embedded file, the default) or PostgreSQL.
//
// Exit codes are part of the contract scripts rely on; each command documents
// its own. Everywhere: 2 means a usage error or an unreachable database.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/schemastate/schemastate/internal/tool/dsn"
	"github.com/schemastate/schemastate/internal/tool/redact"

	_ "github.com/schemastate/schemastate/drivers"
)

// command is one subcommand; its run lives in a cmd_*.go file.
type command struct {
	name    string
	summary string
	// exits lists the command's exit codes, printed by its -h.
	exits string
	// subExits replaces exits in the -h of a subcommand whose codes differ
	// (transcript record).
	subExits map[string]string
	run      func(ctx context.Context, e *env, args []string) int
}

// commands is every subcommand, in the order usage lists them: the boot
// sequence and its reads, the writers' tools, the CI checks, the stores
// made for trying and measuring.
var commands = []*command{
	{name: "reconcile", summary: "bring the declared tables to their shape, write execution_since, run the backfill (the boot sequence)",
		exits: "0 ok, 3 a step failed (the database is consistent; retried next boot), 2 usage, unreadable --schema or unreachable database", run: runReconcile},
	{name: "plan", summary: "dry run: print the SQL the shape step would run; changes nothing",
		exits: "0 no change, 1 changes pending, 2 usage, missing host tables or unreachable database", run: runPlan},
	{name: "status", summary: "read-only: activation keys, AC-24c state, AC-33 end state, index sets, store-wide subagent counts (AC-25)",
		exits: "0 read, 2 usage or unreachable database", run: runStatus},
	{name: "subagents", summary: "read-only: a session's, task's or the store's rows with their execution identity, and the counts and coverage a consumer may publish (AC-25)",
		exits: "0 read (an unknown session or a missing table reads as no rows), 2 usage, unreachable database or an execution_since that is not an instant", run: runSubagents},
	{name: "health", summary: "read-only: writer health — shortfall (the alarm), excess, collisions, last observed (AC-28, AC-29)",
		exits: "0 healthy, 1 any other verdict (shortfall, nothing_since_activation, not_activated), 2 usage, missing tables, unreachable database or a capture_since that is not an instant", run: runHealth},
	{name: "ingest", summary: "record newline-delimited subagent frames (a file or stdin) through the live writer",
		exits: "0 every line recorded, 1 some line was malformed (reported with its number, skipped), 2 usage, unreachable database, table not in its declared shape (refused before reading), failed write or read error", run: runIngest},
	{name: "transcript", summary: "background-agent transcripts: show, ls, recover, record",
		exits:    "0 ok, 1 something found wrong, 2 usage or database error",
		subExits: map[string]string{"record": "0 recorded (whatever the child's outcome), 1 a write failed, the transcript already existed, or no line was the provider's, 2 usage or database error"},
		run:      runTranscript},
	{name: "parity", summary: "CI check: fresh, pre-amendment and host-DDL stores reconciled end identical; --against: drift of a live database",
		exits: "0 identical, 1 different, 2 usage or error", run: runParity},
	{name: "compat", summary: "CI check: the writers of this and the base release can both write the frame corpus to the shapes both releases' reconciles leave",
		exits: "0 every frame written, 1 a writer could not write some frame (or refused to start), 2 usage or error", run: runCompat},
	{name: "lint", summary: "review a schema.hcl change: the plan and its hazards on every dialect and installed-base state",
		exits: "0 no hazard at or above --fail-on, 1 hazards at or above it, 2 usage or evaluation error (a bad HCL names file:line)", run: runLint},
	{name: "demo", summary: "try it: give a store the host fixture (and a pre-amendment store) if it has none, then reconcile",
		exits: "0 ok, 3 a step failed, 2 usage, a partial host or unreachable database (as reconcile)", run: runDemo},
	{name: "generate", summary: "write a reference-shaped store (benchmarks, demos): history, subagents, an installed-base state",
		exits: "0 written, 1 the store could not be written (partial rows may remain), 3 the database already holds a store (nothing written), 2 usage or unreachable database", run: runGenerate},
	{name: "bench", summary: "cost curves: generate stores and time each operation against its floor and anchors on the same data",
		exits: "0 measured, 1 a measurement could not be taken, 3 the database is not empty, 2 usage or unreachable database", run: runBench},
}

// lookup is the command named name, or nil.
func lookup(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

// env is what a command may touch: its streams and a logger that writes to
// stderr (never stdout, which carries results and JSON).
type env struct {
	// cmd is the command running, whose exit codes its -h prints.
	cmd            *command
	stdin          io.Reader
	stdout, stderr io.Writer
	logger         *slog.Logger
	// sqliteBusy is the busy timeout of the SQLite connections the
	// command opens (0: dsn.DefaultBusyTimeout).
	sqliteBusy time.Duration
}

// Exit codes shared by every command.
const (
	exitOK    = 0
	exitUsage = 2
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return newEnv(args, stdin, stdout, stderr).run(ctx, args)
}

// newEnv is the env of a command line: every byte it prints goes through
// redact, so the passwords of every DSN on the command line and of
// PGPASSWORD are masked wherever a message repeats them (a driver error, a
// parser quoting a malformed URL, JSON).
func newEnv(args []string, stdin io.Reader, stdout, stderr io.Writer) *env {
	var secrets []string
	for _, a := range args {
		secrets = append(secrets, redact.Secrets(a)...)
	}
	if pw := os.Getenv("PGPASSWORD"); pw != "" {
		secrets = append(secrets, pw)
	}
	stdout, stderr = redact.NewWriter(stdout, secrets), redact.NewWriter(stderr, secrets)
	return &env{stdin: stdin, stdout: stdout, stderr: stderr,
		logger: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: logLevel()}))}
}

// run runs the command args name.
func (e *env) run(ctx context.Context, args []string) int {
	if len(args) == 0 {
		usage(e.stderr) // a usage error: the output is not a result
		return exitUsage
	}
	if len(args) == 2 && args[0] == "help" && lookup(args[1]) != nil {
		args = []string{args[1], "-h"} // help CMD is CMD -h
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(e.stdout)
		return exitOK
	}
	c := lookup(args[0])
	if c == nil {
		fmt.Fprintf(e.stderr, "schemastate: unknown command %q\n\n", args[0])
		usage(e.stderr)
		return exitUsage
	}
	e.cmd = c
	// A stop (SIGTERM, SIGINT) is logged as it comes: a command finishing a
	// write goes on until the write is done (transcript record's final
	// writes are not cancelled), and whoever sent it sees why it has not
	// ended yet.
	logged := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(logged)
		e.logger.Info("stop requested; finishing the writes under way", "cause", context.Cause(ctx))
	})
	defer func() {
		if !stop() {
			<-logged
		}
	}()
	return c.run(ctx, e, args[1:])
}

func logLevel() slog.Level {
	switch strings.ToLower(os.Getenv("SCHEMASTATE_LOG")) {
	case "debug":
		return slog.LevelDebug
	case "info":
		return slog.LevelInfo
	case "error":
		return slog.LevelError
	}
	return slog.LevelWarn
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: schemastate <command> [flags]")
	fmt.Fprintln(w)
	for _, c := range commands {
		fmt.Fprintf(w, "  %-12s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "--db takes %s (default %s).\n", dsn.Supported, dsn.DefaultDSN)
	fmt.Fprintln(w, "Run 'schemastate <command> -h' for a command's flags and exit codes; exit 2 is always")
	fmt.Fprintln(w, "a usage error or an unreachable database.")
}

// flags builds a FlagSet whose errors go to stderr and never exit the process.
// Its usage is the synopsis, every flag with its default, and the exit codes.
func flags(e *env, name, usageLine string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		fmt.Fprintf(e.stderr, "usage: schemastate %s %s\n", name, usageLine)
		fs.PrintDefaults()
		words := strings.Fields(name)
		if c := e.cmd; c != nil {
			exits := c.exits
			if len(words) > 1 && c.subExits[words[1]] != "" {
				exits = c.subExits[words[1]]
			}
			if exits != "" {
				fmt.Fprintf(e.stderr, "exit: %s\n", exits)
			}
		}
	}
	return fs
}

// parse parses args and reports the exit code to return when parsing failed
// (or -h was asked for). Flags may come before, between or after positional
// arguments (`ingest FILE --db X`); everything after "--" is positional.
// The positionals are left in fs.Args().
func parse(fs *flag.FlagSet, args []string) (int, bool) {
	var pos []string
	for rest := args; ; {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return exitOK, false
			}
			return exitUsage, false
		}
		if n := len(rest) - fs.NArg(); n > 0 && rest[n-1] == "--" {
			pos = append(pos, fs.Args()...)
			break
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	_ = fs.Parse(append([]string{"--"}, pos...)) // only sets fs.Args()
	return 0, true
}

// parseArgs is parse for a command that takes at most max positional
// arguments (what names them, for the message): one more is a usage error
// that says exactly which argument was not understood.
func parseArgs(e *env, fs *flag.FlagSet, args []string, max int, what string) (int, bool) {
	if code, ok := parse(fs, args); !ok {
		return code, false
	}
	if fs.NArg() <= max {
		return 0, true
	}
	extra := fs.Arg(max)
	msg := fmt.Sprintf("schemastate %s: unexpected argument %q", fs.Name(), extra)
	switch {
	case max == 0 && fs.Lookup("db") != nil && looksLikeDatabase(extra):
		msg += fmt.Sprintf(": %s takes no positional argument (a database is given as --db %s)", fs.Name(), extra)
	case max == 0:
		msg += fmt.Sprintf(": %s takes no positional argument", fs.Name())
	default:
		msg += fmt.Sprintf(": %s takes at most %s", fs.Name(), what)
	}
	fmt.Fprintln(e.stderr, msg)
	fmt.Fprintf(e.stderr, "run 'schemastate %s -h' for its flags\n", fs.Name())
	return exitUsage, false
}

// parseFlags is parseArgs for a command that takes no positional argument.
// Each flag named in required must be given a value: a missing one prints
// the usage and is a usage error.
func parseFlags(e *env, fs *flag.FlagSet, args []string, required ...string) (int, bool) {
	if code, ok := parseArgs(e, fs, args, 0, ""); !ok {
		return code, false
	}
	for _, name := range required {
		if fs.Lookup(name).Value.String() == "" {
			fs.Usage()
			return exitUsage, false
		}
	}
	return 0, true
}

// looksLikeDatabase reports an argument that was probably meant for --db.
func looksLikeDatabase(s string) bool {
	return strings.Contains(s, "://") || strings.HasPrefix(s, "sqlite:") ||
		strings.HasSuffix(s, ".db") || strings.HasSuffix(s, ".sqlite") || strings.HasSuffix(s, ".sqlite3")
}

// nonNegative is a duration flag that refuses a negative value when parsed.
type nonNegative struct{ d *time.Duration }

func (n nonNegative) String() string {
	if n.d == nil {
		return ""
	}
	return n.d.String()
}

func (n nonNegative) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return errors.New("not a duration (e.g. 30s, 2m)")
	}
	if d < 0 {
		return errors.New("must not be negative")
	}
	*n.d = d
	return nil
}

// durationFlag registers a duration flag that must not be negative.
func durationFlag(fs *flag.FlagSet, name string, def time.Duration, usage string) *time.Duration {
	d := def
	fs.Var(nonNegative{&d}, name, usage)
	return &d
}

// fail prints a command's error once prefixed: "schemastate CMD: …", and
// returns exitUsage, the exit code of a command that could not answer (one
// whose failure has a code of its own returns that instead). An error that
// already starts with its command's or its package's name (the health
// package's "health: …", gen's "gen: …") keeps only one of them.
func fail(e *env, cmd string, err error) int {
	msg := err.Error()
	for _, p := range []string{cmd, packageOf(cmd)} {
		if p != "" {
			msg = strings.TrimPrefix(msg, p+": ")
		}
	}
	fmt.Fprintf(e.stderr, "schemastate %s: %s\n", cmd, msg)
	return exitUsage
}

// usagef prints a command's usage error, "schemastate CMD: " and format
// applied to a, and returns exitUsage.
func usagef(e *env, cmd, format string, a ...any) int {
	fmt.Fprintf(e.stderr, "schemastate %s: %s\n", cmd, fmt.Sprintf(format, a...))
	return exitUsage
}

// usageError prints err as "schemastate: …" and returns exitUsage.
func usageError(e *env, err error) int {
	fmt.Fprintf(e.stderr, "schemastate: %v\n", err)
	return exitUsage
}

// packageOf names the package whose errors a command prints.
func packageOf(cmd string) string {
	switch cmd {
	case "generate":
		return "gen"
	case "plan", "status", "reconcile", "demo":
		return "reconcile"
	}
	return cmd
}

// terminal reports whether w (or the writer it wraps) is a terminal: progress
// lines are for people, and stay off a pipe or a file.
func terminal(w io.Writer) bool {
	for {
		if f, ok := w.(*os.File); ok {
			st, err := f.Stat()
			return err == nil && st.Mode()&os.ModeCharDevice != 0
		}
		u, ok := w.(interface{ Unwrap() io.Writer })
		if !ok {
			return false
		}
		w = u.Unwrap()
	}
}

// output prints a command's result: v as one JSON object with --json, as
// text (by text) otherwise.
func output[T any](e *env, asJSON bool, v T, text func(*env, T)) {
	if asJSON {
		writeJSON(e.stdout, v)
		return
	}
	text(e, v)
}

// writeJSON prints v as one indented JSON object.
func writeJSON(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
