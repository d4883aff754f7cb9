package transcript_test

import (
	"bufio"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/transcript"
)

// Child-process roles. The test binary re-executes itself with
// TRANSCRIPT_TEST_ROLE set; TestMain then plays that role instead of running
// tests, so the cross-process tests use real separate processes.
const (
	envRole  = "TRANSCRIPT_TEST_ROLE"
	envRoot  = "TRANSCRIPT_TEST_ROOT"
	envSess  = "TRANSCRIPT_TEST_SESSION"
	envAgent = "TRANSCRIPT_TEST_AGENT"
	envArg   = "TRANSCRIPT_TEST_ARG"
)

func TestMain(m *testing.M) {
	if role := os.Getenv(envRole); role != "" {
		os.Exit(playRole(role))
	}
	os.Exit(dbtest.Main(m))
}

// printOutcome prints, for the parent to read, how a role's call ended: ok
// when err is nil, known when err is target, and the error otherwise.
func printOutcome(err error, ok string, target error, known string) {
	switch {
	case err == nil:
		fmt.Println(ok)
	case errors.Is(err, target):
		fmt.Println(known)
	default:
		fmt.Println("error:", err)
	}
}

func playRole(role string) int {
	s, err := transcript.NewStore(os.Getenv(envRoot))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	sess, agent, arg := os.Getenv(envSess), os.Getenv(envAgent), os.Getenv(envArg)
	switch role {
	case "finish":
		// arg is "<status> <go-file>": announce readiness, wait for the go
		// file, then race the other finisher.
		status, gofile, _ := strings.Cut(arg, " ")
		fmt.Println("ready")
		for {
			if _, err := os.Stat(gofile); err == nil {
				break
			}
			time.Sleep(50 * time.Microsecond)
		}
		err := s.Finish(ctx, sess, agent, transcript.End{Status: transcript.Status(status), Error: "by " + status})
		printOutcome(err, "finished", transcript.ErrFinished, "already")
		return 0
	case "append-fsize":
		// arg is a file-size limit in bytes: appends past it fail with EFBIG
		// (RLIMIT_FSIZE; the Go runtime ignores SIGXFSZ), even as root. The
		// batch is three ~1 KiB events, so the limit can fall inside it.
		var limit uint64
		fmt.Sscan(arg, &limit)
		if err := limitFileSize(limit); err != nil {
			fmt.Println("setrlimit:", err)
			return 3
		}
		pad := strings.Repeat("y", 1000)
		err := s.Append(ctx, sess, agent,
			transcript.Event{Type: transcript.AssistantMessage, Text: "batch-1 " + pad},
			transcript.Event{Type: transcript.AssistantMessage, Text: "batch-2 " + pad},
			transcript.Event{Type: transcript.AssistantMessage, Text: "batch-3 " + pad})
		printOutcome(err, "appended", syscall.EFBIG, "efbig")
		return 0
	case "finish-db":
		// arg is a database DSN: finish as completed with the lifecycle in
		// workspace /ws. The parent holds the table's lock, so this blocks
		// after the document is published, and kills the process there.
		driver := "sqlite"
		if strings.HasPrefix(arg, "postgres") {
			driver = "pgx"
		}
		db, err := sql.Open(driver, arg)
		if err != nil {
			fmt.Println("open:", err)
			return 3
		}
		l, err := transcript.NewLifecycle(db)
		if err != nil {
			fmt.Println("lifecycle:", err)
			return 3
		}
		s, err = transcript.NewStore(os.Getenv(envRoot), transcript.WithLifecycle(l, "/ws"))
		if err != nil {
			fmt.Println(err)
			return 3
		}
		err = s.Finish(ctx, sess, agent, transcript.End{Status: transcript.Completed})
		fmt.Println("returned:", err)
		return 0
	case "append-loop":
		// Append forever; the parent kills this process with SIGKILL.
		pad := strings.Repeat("x", 3000)
		for i := 1; ; i++ {
			e := transcript.Event{Type: transcript.AssistantMessage, Text: fmt.Sprintf("event %d %s", i, pad)}
			if err := s.Append(ctx, sess, agent, e); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 3
			}
		}
	}
	fmt.Fprintln(os.Stderr, "unknown role", role)
	return 3
}

func child(t *testing.T, role, root, sess, agent, arg string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envRole+"="+role, envRoot+"="+root, envSess+"="+sess, envAgent+"="+agent, envArg+"="+arg)
	cmd.Stderr = os.Stderr
	return cmd
}

// Exactly-once finish across PROCESSES: two processes finish the same
// transcript at the same instant, many times over. Each time exactly one wins,
// the other is told it was already finished, and the document is the
// winner's.
func TestTranscript_FinishExactlyOnceAcrossTwoProcesses(t *testing.T) {
	root := filepath.Join(t.TempDir(), "conversation")
	s, err := transcript.NewStore(root)
	require.NoError(t, err)
	for round := 0; round < 12; round++ {
		agent := fmt.Sprintf("agent-%d", round)
		require.NoError(t, s.Create(ctx, header("sess-race", agent, transcript.KindRunInBackground)))
		require.NoError(t, s.Append(ctx, "sess-race", agent, msg(transcript.UserMessage, "go")))
		gofile := filepath.Join(t.TempDir(), "go")
		statuses := []string{"completed", "cancelled"}
		outs := make([]*bufio.Scanner, 2)
		cmds := make([]*exec.Cmd, 2)
		for i, st := range statuses {
			cmds[i] = child(t, "finish", root, "sess-race", agent, st+" "+gofile)
			pipe, err := cmds[i].StdoutPipe()
			require.NoError(t, err)
			require.NoError(t, cmds[i].Start())
			outs[i] = bufio.NewScanner(pipe)
			require.True(t, outs[i].Scan())
			require.Equal(t, "ready", outs[i].Text())
		}
		require.NoError(t, os.WriteFile(gofile, nil, 0o644))
		results := map[string]string{}
		for i, st := range statuses {
			require.True(t, outs[i].Scan(), "child %s printed nothing", st)
			results[st] = outs[i].Text()
			require.NoError(t, cmds[i].Wait())
		}
		winners := 0
		var winner string
		for st, r := range results {
			switch r {
			case "finished":
				winners++
				winner = st
			case "already":
			default:
				t.Fatalf("round %d: child %s: %s", round, st, r)
			}
		}
		require.Equal(t, 1, winners, "round %d: %v", round, results)
		tr, err := s.Load("sess-race", agent)
		require.NoError(t, err)
		require.Equal(t, transcript.Status(winner), tr.Status)
		require.Equal(t, "by "+winner, tr.Error)
		require.Len(t, tr.Events, 1)
	}
}

// kill -9 while appending in a loop: the transcript stays readable, still
// running, and its events are exactly a prefix of what the child sent; the
// next writer continues it and can finish it.
func TestTranscript_KillNineMidAppendLeavesReadablePrefix(t *testing.T) {
	root := filepath.Join(t.TempDir(), "conversation")
	s, err := transcript.NewStore(root)
	require.NoError(t, err)
	require.NoError(t, s.Create(ctx, header("sess-kill", "agent-kill", transcript.KindRunInBackground)))
	p, _ := s.PathsFor("sess-kill", "agent-kill")

	for round := 0; round < 3; round++ {
		cmd := child(t, "append-loop", root, "sess-kill", "agent-kill", "")
		require.NoError(t, cmd.Start())
		start, _ := os.Stat(p.Log)
		deadline := time.Now().Add(30 * time.Second)
		for {
			fi, err := os.Stat(p.Log)
			require.NoError(t, err)
			if fi.Size() > start.Size()+200*3000 {
				break
			}
			require.True(t, time.Now().Before(deadline), "child appended too little")
			time.Sleep(time.Millisecond)
		}
		require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
		err := cmd.Wait()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee)
		require.Equal(t, syscall.SIGKILL, ee.Sys().(syscall.WaitStatus).Signal())

		tr, err := s.Load("sess-kill", "agent-kill")
		require.NoError(t, err, "round %d", round)
		require.Equal(t, transcript.Running, tr.Status)
		require.GreaterOrEqual(t, len(tr.Events), 150*(round+1))
		// Each child starts again at "event 1": the log is the concatenation
		// of every round's prefix, in order, with no gap inside a round.
		want := 1
		for _, e := range tr.Events {
			n := 0
			_, err := fmt.Sscanf(e.Text, "event %d ", &n)
			require.NoError(t, err)
			if n == 1 {
				want = 1
			}
			require.Equal(t, want, n, "events must be a gapless prefix of what was sent")
			want++
		}
		require.Equal(t, int64(len(tr.Events)), tr.LastSeq)
	}
	require.NoError(t, s.Append(ctx, "sess-kill", "agent-kill", msg(transcript.AssistantMessage, "after the crash")))
	require.NoError(t, s.Finish(ctx, "sess-kill", "agent-kill", transcript.End{Status: transcript.Failed, Error: "killed"}))
	tr, err := s.Load("sess-kill", "agent-kill")
	require.NoError(t, err)
	require.Equal(t, "after the crash", tr.FinalResponse())
}

// runRole runs a child process in role and returns its stdout, trimmed.
func runRole(t *testing.T, role, root, sess, agent, arg string) string {
	t.Helper()
	cmd := child(t, role, root, sess, agent, arg)
	out, err := cmd.Output()
	require.NoError(t, err, "child %s: %s", role, out)
	return strings.TrimSpace(string(out))
}

// A storage write failure in the middle of an append (the file-size limit
// reached: EFBIG, a real kernel refusal, as disk-full would be) fails the
// whole batch: Append returns the error and NONE of the batch's events are in
// the transcript, neither while running nor in the finished document. A batch
// half in the log and reported as failed would be retried by the caller and
// recorded twice.
func TestTranscript_AppendFailingMidBatchLeavesNoneOfIt(t *testing.T) {
	if !canLimitFileSize {
		t.Skip("no per-process file-size limit on this OS to make a write fail")
	}
	s, _ := created(t, "sess-efbig", "agent-efbig", transcript.KindRunInBackground)
	require.NoError(t, s.Append(ctx, "sess-efbig", "agent-efbig", msg(transcript.UserMessage, "before")))
	p, _ := s.PathsFor("sess-efbig", "agent-efbig")
	fi, err := os.Stat(p.Log)
	require.NoError(t, err)
	// Room for the first ~1.1 KiB line of the batch and part of the second.
	limit := fi.Size() + 1500
	require.Equal(t, "efbig", runRole(t, "append-fsize", s.Root(), "sess-efbig", "agent-efbig", fmt.Sprint(limit)))

	tr, err := s.Load("sess-efbig", "agent-efbig")
	require.NoError(t, err)
	require.Len(t, tr.Events, 1, "a failed append must leave none of its batch")
	require.Equal(t, []string{"before"}, texts(tr))
	require.Zero(t, tr.TornBytes)

	require.NoError(t, s.Append(ctx, "sess-efbig", "agent-efbig", msg(transcript.AssistantMessage, "after")))
	require.NoError(t, s.Finish(ctx, "sess-efbig", "agent-efbig", transcript.End{Status: transcript.Completed}))
	tr, err = s.Load("sess-efbig", "agent-efbig")
	require.NoError(t, err)
	require.Equal(t, []string{"before", "after"}, texts(tr))
	require.Equal(t, int64(2), tr.LastSeq)
}

// kill -9 after finish published the document but before the lifecycle row
// was ended (the row's lock held by another connection keeps the process
// there). The transcript is terminal and says so; the row still says
// 'running'. ls must name the disagreement, and recover must carry the
// transcript's terminal record over to the row — nothing else ever will: the
// host's retry of Finish is answered "already finished".
func TestTranscript_KillNineBetweenDocumentAndLifecycleEnd(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		l, s := lifecycleStore(t, db)
		root := s.Root()
		require.NoError(t, s.Create(ctx, header("sess-k9", "agent-k9", transcript.KindScheduled)))
		require.NoError(t, s.Append(ctx, "sess-k9", "agent-k9", msg(transcript.UserMessage, "work"), msg(transcript.AssistantMessage, "done")))
		p, _ := s.PathsFor("sess-k9", "agent-k9")
		id := transcript.Identity{WorkspacePath: "/ws", SessionID: "sess-k9", AgentID: "agent-k9"}

		release := db.LockWrites(t, "background_agent_log")
		cmd := child(t, "finish-db", root, "sess-k9", "agent-k9", db.DSN)
		require.NoError(t, cmd.Start())
		require.Eventually(t, func() bool { _, err := os.Stat(p.Transcript); return err == nil }, 20*time.Second, time.Millisecond)
		require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
		_ = cmd.Wait()
		release()

		tr, err := s.Load("sess-k9", "agent-k9")
		require.NoError(t, err)
		require.Equal(t, transcript.Completed, tr.Status)
		e, err := l.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, "running", e.Status, "the crash left the row behind")

		idx, err := transcript.Index(ctx, s, l, "", "sess-k9")
		require.NoError(t, err)
		require.Len(t, idx, 1)
		require.Contains(t, strings.Join(idx[0].Problems, "\n"), "still says running")

		// The host's own retry is told the transcript is finished…
		require.ErrorIs(t, s.Finish(ctx, "sess-k9", "agent-k9", transcript.End{Status: transcript.Completed}), transcript.ErrFinished)
		// …and recover ends the row as the transcript ended.
		rep, err := transcript.Recover(ctx, root, l, "")
		require.NoError(t, err)
		require.Empty(t, rep.Finished)
		require.Empty(t, rep.Problems)
		e, err = l.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, "completed", e.Status)
		require.NotNil(t, e.CompletedAt)
		require.Equal(t, tr.EndedAt.Truncate(time.Microsecond), *e.CompletedAt)
		require.Equal(t, "ok", e.TranscriptStatus)
		idx, err = transcript.Index(ctx, s, l, "", "sess-k9")
		require.NoError(t, err)
		require.Empty(t, idx[0].Problems)
	})
}
