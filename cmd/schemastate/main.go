// Command schemastate reconciles, inspects and feeds the subagent-context
// store on SQLite (an embedded file, the default) or PostgreSQL.
//
// Exit codes are part of the contract scripts rely on; each command documents
// its own. Everywhere: 2 means a usage error or an unreachable database.
package main

import (
	"context"
	_ "embed"
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
	run      runFunc
}

// runFunc runs a command on its arguments (those after its name) and
// returns its exit code.
type runFunc func(ctx context.Context, e *env, args []string) int

// commandsText is the command table: each command's name, summary and exit
// codes, in the order usage lists them.
//
//go:embed commands.txt
var commandsText string

// runs is each command of commandsText by its name.
var runs = map[string]runFunc{
	"reconcile":  runReconcile,
	"plan":       runPlan,
	"status":     runStatus,
	"subagents":  runSubagents,
	"health":     runHealth,
	"ingest":     runIngest,
	"transcript": runTranscript,
	"parity":     runParity,
	"compat":     runCompat,
	"lint":       runLint,
	"demo":       runDemo,
	"generate":   runGenerate,
	"bench":      runBench,
}

// commands is every subcommand, in the order usage lists them.
var commands = parseCommands(commandsText, runs)

// parseCommands reads a command table: a line that is not indented is a
// command's name and its summary; an indented "exit: CODES" its exit codes,
// "exit SUB: CODES" those of its subcommand SUB; blank lines and "#" lines
// are comments. A command without a run, or a run without a command, is a
// defect of this binary: it panics at start.
func parseCommands(text string, runs map[string]runFunc) []*command {
	var cs []*command
	for _, line := range strings.Split(text, "\n") {
		body := strings.TrimSpace(line)
		switch {
		case body == "" || strings.HasPrefix(body, "#"):
		case body == line:
			name, summary, _ := strings.Cut(body, " ")
			run := runs[name]
			if run == nil {
				panic("commands.txt: command " + name + " has no run")
			}
			cs = append(cs, &command{name: name, summary: strings.TrimSpace(summary), run: run})
		case len(cs) > 0 && strings.HasPrefix(body, "exit"):
			c := cs[len(cs)-1]
			key, codes, _ := strings.Cut(body, ": ")
			if sub, ok := strings.CutPrefix(key, "exit "); ok {
				if c.subExits == nil {
					c.subExits = map[string]string{}
				}
				c.subExits[sub] = codes
			} else {
				c.exits = codes
			}
		default:
			panic("commands.txt: not a command or its exit codes: " + line)
		}
	}
	if len(cs) != len(runs) {
		panic("commands.txt: a run has no command")
	}
	return cs
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
