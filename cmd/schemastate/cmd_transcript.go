package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/schemastate/schemastate/internal/tool/termtext"
	"github.com/schemastate/schemastate/transcript"
)

// Exit codes of transcript: 0 ok; 1 something was found wrong (a corrupt or
// missing transcript, a recorded persistence failure, recover finished a
// transcript); 2 usage or database errors.
const exitFoundWrong = 1

const transcriptUsage = `usage: schemastate transcript <subcommand> [flags]

  show PATH | --root DIR --session S --agent A [--json]
        print one transcript (finished document, or a running one rendered from its log)
  ls --root DIR --session S [--db DSN] [--workspace W] [--json]
        a parent session's background executions, from the transcript directory and
        (with --db) background_agent_log; names anything a reader should not trust
  recover --root DIR --db DSN [--workspace W] [--json]
        finish, as failed/"interrupted", every running transcript whose execution is not
        alive: alive means a background_agent_log row for its (session, agent) — in
        --workspace when given — with a non-terminal status; a terminal row or no row
        is not alive; end, as its transcript ended, a lifecycle row still running
        whose transcript is finished
  record --root DIR --session S --agent A --provider P [--kind K] [--execution E]
         [--model M] [--prompt TEXT] [--provider-session ID] [--timeout D]
         [--db DSN --workspace W] < provider-stream
        record a provider event stream (claude, opencode, codex) as a transcript: create,
        append as each record arrives, finish with the provider's outcome; SIGTERM or
        SIGINT ends it as cancelled, --timeout as timed_out (transcript and row alike)

exit: 0 ok, 1 something found wrong, 2 usage or database error
`

func runTranscript(ctx context.Context, e *env, args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprint(e.stderr, transcriptUsage)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	switch args[0] {
	case "show":
		return transcriptShow(ctx, e, args[1:])
	case "ls":
		return transcriptLs(ctx, e, args[1:])
	case "recover":
		return transcriptRecover(ctx, e, args[1:])
	case "record":
		return transcriptRecord(ctx, e, args[1:])
	}
	fmt.Fprintf(e.stderr, "schemastate transcript: unknown subcommand %q\n\n%s", args[0], transcriptUsage)
	return exitUsage
}

// childFlags registers the flags that name one child's transcript: --root
// (the conversation-storage root), --session (the parent's) and --agent.
func childFlags(fs *flag.FlagSet) (root, session, agent *string) {
	root = fs.String("root", "", "conversation-storage root")
	session = fs.String("session", "", "parent session id")
	agent = fs.String("agent", "", "agent (child) id")
	return root, session, agent
}

func transcriptShow(ctx context.Context, e *env, args []string) int {
	fs := flags(e, "transcript show", "PATH | --root DIR --session S --agent A [--json]")
	root, session, agent := childFlags(fs)
	asJSON := fs.Bool("json", false, "print the transcript as JSON")
	if code, ok := parseArgs(e, fs, args, 1, "one PATH"); !ok {
		return code
	}
	pos := fs.Args()
	var (
		r   *transcript.Reader
		err error
	)
	switch {
	case len(pos) == 1 && *root == "" && *session == "" && *agent == "":
		r, err = transcript.OpenPath(ctx, pos[0])
	case len(pos) == 0 && *root != "" && *session != "" && *agent != "":
		var s *transcript.Store
		if s, err = transcript.NewStore(*root); err == nil {
			r, err = s.Open(ctx, *session, *agent)
		}
	default:
		fs.Usage()
		return exitUsage
	}
	if errors.Is(err, transcript.ErrInvalidID) {
		return usageError(e, err)
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "schemastate: %v\n", err)
		return exitFoundWrong
	}
	defer r.Close()
	// The events stream from the file to stdout: memory follows the
	// largest event, never the transcript.
	if *asJSON {
		err = r.WriteJSON(ctx, e.stdout)
	} else {
		err = printTranscript(ctx, e, r)
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "schemastate: %v\n", err)
		return exitFoundWrong
	}
	return exitOK
}

// printTranscript prints a transcript's summary, then each event as it is
// read. Every text from the transcript is escaped (termtext): a provider's
// output can hold terminal control sequences.
func printTranscript(ctx context.Context, e *env, r *transcript.Reader) error {
	w := bufio.NewWriterSize(e.stdout, 64<<10)
	t := r.Summary()
	fmt.Fprintf(w, "%s\n", esc(t.Path))
	fmt.Fprintf(w, "parent session %s  agent %s  execution %s\n", esc(t.ParentSessionID), esc(t.AgentID), esc(orDash(t.ExecutionID)))
	fmt.Fprintf(w, "kind %s  provider %s  model %s\n", esc(string(t.Kind)), esc(orDash(t.Provider)), esc(orDash(t.Model)))
	fmt.Fprintf(w, "started %s", t.StartedAt.Format("2006-01-02T15:04:05.000000Z07:00"))
	if t.EndedAt != nil {
		fmt.Fprintf(w, "  ended %s", t.EndedAt.Format("2006-01-02T15:04:05.000000Z07:00"))
	}
	fmt.Fprintf(w, "\nstatus %s", esc(string(t.Status)))
	if t.Error != "" {
		fmt.Fprintf(w, "  error: %s", esc(t.Error))
	}
	fmt.Fprintf(w, "\n%d events (last seq %d)", r.Len(), t.LastSeq)
	if t.TornBytes > 0 {
		fmt.Fprintf(w, "; %d bytes of a torn last line ignored", t.TornBytes)
	}
	fmt.Fprintln(w)
	err := r.Each(ctx, func(ev transcript.Event) error {
		fmt.Fprintf(w, "\n#%d %s %s\n", ev.Seq, ev.At.Format("15:04:05.000"), esc(string(ev.Type)))
		switch ev.Type {
		case transcript.UserMessage, transcript.AssistantMessage:
			fmt.Fprintln(w, indent(ev.Text))
		case transcript.ToolCall:
			fmt.Fprintf(w, "  %s %s  %s\n", esc(ev.Call.Name), esc(ev.Call.ID), esc(string(ev.Call.Input)))
			printResult(w, ev.Result)
		case transcript.ToolResult:
			fmt.Fprintln(w, "  (result for a call not in this transcript)")
			printResult(w, ev.Result)
		}
		return nil
	})
	if ferr := w.Flush(); err == nil {
		err = ferr
	}
	return err
}

func printResult(w io.Writer, r *transcript.Result) {
	switch {
	case r == nil:
		fmt.Fprintln(w, "  → no result")
	case r.IsError:
		fmt.Fprintf(w, "  → FAILED (#%d)\n%s\n", r.Seq, indent(r.Error))
		if r.Output != "" && r.Output != r.Error {
			fmt.Fprintln(w, indent(r.Output))
		}
	default:
		fmt.Fprintf(w, "  → ok (#%d)\n", r.Seq)
		if r.Output != "" {
			fmt.Fprintln(w, indent(r.Output))
		}
	}
}

// esc is text from a transcript or the database, safe to print.
func esc(s string) string { return termtext.Escape(s) }

// indent is s, escaped, with each line indented.
func indent(s string) string { return "    " + strings.ReplaceAll(esc(s), "\n", "\n    ") }

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func transcriptLs(ctx context.Context, e *env, args []string) int {
	fs := flags(e, "transcript ls", "--root DIR --session S [--db DSN] [--workspace W] [--json]")
	root := fs.String("root", "", "conversation-storage root")
	session := fs.String("session", "", "parent session id")
	dsn := fs.String("db", "", "database holding background_agent_log (optional)")
	workspace := fs.String("workspace", "", "only lifecycle rows of this workspace_path")
	asJSON := fs.Bool("json", false, "print one JSON object")
	if code, ok := parseFlags(e, fs, args, "root", "session"); !ok {
		return code
	}
	s, err := transcript.NewStore(*root)
	if err != nil {
		return usageError(e, err)
	}
	return withLifecycle(ctx, e, *dsn, readOnly, *root, func(l *transcript.Lifecycle) int {
		idx, err := transcript.Index(ctx, s, l, *workspace, *session)
		if err != nil {
			return usageError(e, err)
		}
		wrong := 0
		for _, x := range idx {
			if len(x.Problems) > 0 {
				wrong++
			}
		}
		if *asJSON {
			writeJSON(e.stdout, struct {
				Root     string                  `json:"root"`
				Session  string                  `json:"session"`
				Agents   []transcript.IndexEntry `json:"agents"`
				Problems int                     `json:"agents_with_problems"`
			}{s.Root(), *session, idx, wrong})
		} else {
			printIndex(e, idx, l != nil)
		}
		if wrong > 0 {
			return exitFoundWrong
		}
		return exitOK
	})
}

// printIndex lists a session's executions, one line each with its problems
// below it; withLifecycle says whether background_agent_log was read.
func printIndex(e *env, idx []transcript.IndexEntry, withLifecycle bool) {
	fmt.Fprintf(e.stdout, "%-36s %-18s %-10s %-10s %-8s %6s  %s\n", "AGENT", "KIND", "TRANSCRIPT", "LIFECYCLE", "RECORDED", "EVENTS", "PATH")
	for _, x := range idx {
		kind, tstatus, events, path := "-", "missing", "-", "-"
		if t := x.Transcript; t != nil {
			kind, tstatus, events, path = string(t.Kind), string(t.Status), fmt.Sprint(t.Events), t.Path
			if t.Err != "" {
				tstatus = "unreadable"
			}
		}
		life, rec := "-", "-"
		if withLifecycle {
			life = "missing"
		}
		for _, r := range x.Lifecycle {
			life, rec = r.Status, r.TranscriptStatus
			if kind == "-" {
				kind = r.Kind
			}
			if path == "-" && r.TranscriptPath != "" {
				path = r.TranscriptPath
			}
		}
		if strings.HasPrefix(rec, "error:") {
			rec = "error"
		} else if rec == "" {
			rec = "-"
		}
		fmt.Fprintf(e.stdout, "%-36s %-18s %-10s %-10s %-8s %6s  %s\n", esc(x.AgentID), esc(kind), esc(tstatus), esc(life), esc(rec), events, esc(path))
		for _, p := range x.Problems {
			fmt.Fprintf(e.stdout, "    ! %s\n", esc(p))
		}
	}
}

func transcriptRecover(ctx context.Context, e *env, args []string) int {
	fs := flags(e, "transcript recover", "--root DIR --db DSN [--workspace W] [--json]")
	root := fs.String("root", "", "conversation-storage root")
	dsn := fs.String("db", "", "database holding background_agent_log (required)")
	workspace := fs.String("workspace", "", "judge liveness only by rows of this workspace_path")
	asJSON := fs.Bool("json", false, "print one JSON object")
	if code, ok := parseFlags(e, fs, args, "root"); !ok {
		return code
	}
	if *dsn == "" {
		fmt.Fprintln(e.stderr, "schemastate: transcript recover needs --db: whether an execution is alive is read from background_agent_log")
		return exitUsage
	}
	return withLifecycle(ctx, e, *dsn, readWrite, *root, func(l *transcript.Lifecycle) int {
		rep, err := transcript.Recover(ctx, *root, l, *workspace)
		if err != nil {
			return usageError(e, err)
		}
		output(e, *asJSON, rep, printRecovery)
		if len(rep.Finished) > 0 || len(rep.RowsEnded) > 0 || len(rep.Problems) > 0 {
			return exitFoundWrong
		}
		return exitOK
	})
}

// printRecovery says what recover finished, ended, left running and could
// not do, one line each, then the counts.
func printRecovery(e *env, rep *transcript.RecoverReport) {
	for _, r := range rep.Finished {
		fmt.Fprintf(e.stdout, "finished %s/%s as failed: %s\n", esc(r.SessionID), esc(r.AgentID), esc(r.Reason))
	}
	for _, r := range rep.RowsEnded {
		fmt.Fprintf(e.stdout, "ended    %s/%s: %s\n", esc(r.SessionID), esc(r.AgentID), esc(r.Reason))
	}
	for _, a := range rep.Alive {
		fmt.Fprintf(e.stdout, "alive    %s/%s (left running)\n", esc(a.SessionID), esc(a.AgentID))
	}
	for _, p := range rep.Problems {
		fmt.Fprintf(e.stdout, "problem  %s/%s: %s\n", esc(p.SessionID), esc(p.AgentID), esc(p.Error))
	}
	fmt.Fprintf(e.stdout, "%d finished, %d rows ended, %d alive, %d problems\n", len(rep.Finished), len(rep.RowsEnded), len(rep.Alive), len(rep.Problems))
}

func transcriptRecord(ctx context.Context, e *env, args []string) int {
	fs := flags(e, "transcript record", "--root DIR --session S --agent A --provider P [--kind K] [--execution E] [--model M] [--prompt TEXT] [--provider-session ID] [--timeout D] [--db DSN --workspace W] < stream")
	root, session, agent := childFlags(fs)
	provider := fs.String("provider", "", "stream shape: "+strings.Join(transcript.Providers(), ", "))
	kind := fs.String("kind", string(transcript.KindRunInBackground), "run_in_background, todo_delegate, scheduled, …")
	execution := fs.String("execution", "", "execution id")
	model := fs.String("model", "", "model, as known before the first provider turn (when not given: the model the stream reports)")
	prompt := fs.String("prompt", "", "prompt delivered to the child, for streams that do not echo it")
	dsn := fs.String("db", "", "database holding background_agent_log (optional)")
	workspace := fs.String("workspace", "", "workspace_path of the lifecycle row")
	providerSession := fs.String("provider-session", "", "the child's own session id in the provider's stream (OpenCode: keep only this session's events on a shared server)")
	timeout := fs.Duration("timeout", 0, "end the child as timed_out when its stream has not ended after this long (0: no limit)")
	if code, ok := parseFlags(e, fs, args, "root", "session", "agent", "provider"); !ok {
		return code
	}
	if *timeout < 0 {
		fmt.Fprintf(e.stderr, "schemastate: --timeout %v is negative\n", *timeout)
		return exitUsage
	}
	// Ids are checked before the database is opened or anything written: a
	// lifecycle row for a transcript that can never exist would stay
	// running for ever.
	for _, id := range [][2]string{{"session id", *session}, {"agent id", *agent}} {
		if err := transcript.ValidateID(id[0], id[1]); err != nil {
			return usageError(e, err)
		}
	}
	var nopts []transcript.NormalizerOption
	if *providerSession != "" {
		nopts = append(nopts, transcript.WithSession(*providerSession))
	}
	n, err := transcript.NewNormalizer(*provider, nopts...)
	if err != nil {
		return usageError(e, err)
	}
	l, closeDB, ok := openLifecycle(ctx, e, *dsn, readWrite)
	if !ok {
		return exitUsage
	}
	defer closeDB()
	var opts []transcript.Option
	if l != nil {
		opts = append(opts, transcript.WithLifecycle(l, *workspace))
	}
	s, err := transcript.NewStore(*root, opts...)
	if err != nil {
		return usageError(e, err)
	}
	// SIGTERM/SIGINT (ctx) or --timeout stop the reading of the stream,
	// never a write (transcript.Record).
	readCtx := ctx
	if *timeout > 0 {
		var cancel context.CancelFunc
		readCtx, cancel = context.WithTimeoutCause(ctx, *timeout,
			fmt.Errorf("the provider stream had not ended after --timeout %v", *timeout))
		defer cancel()
	}
	h := transcript.Header{ParentSessionID: *session, AgentID: *agent, ExecutionID: *execution,
		Kind: transcript.Kind(*kind), Provider: *provider, Model: *model}
	res, err := transcript.Record(readCtx, s, transcript.Recording{Header: h, Stream: e.stdin, Normalizer: n, Prompt: *prompt})
	for _, f := range failures(err) {
		fmt.Fprintf(e.stderr, "schemastate: %v\n", f)
	}
	switch {
	case errors.Is(err, transcript.ErrInvalidID):
		return exitUsage
	case errors.Is(err, transcript.ErrExists):
		return exitFoundWrong
	}
	fmt.Fprintf(e.stdout, "%s %s%s\n", res.End.Status, res.Paths.Transcript, lostNote(res))
	if err != nil {
		return exitFoundWrong
	}
	return exitOK
}

// lostNote is what record's line adds when persistence failed, so that a
// transcript not written, or written without some events, never reads as
// there and whole.
func lostNote(res transcript.RecordResult) string {
	switch {
	case res.Lost && res.Finished:
		return " (transcript incomplete: see the errors above)"
	case res.Lost:
		return " (transcript NOT written: see the errors above)"
	}
	return ""
}

// failures lists the failures Record joined, one to print per line.
func failures(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
