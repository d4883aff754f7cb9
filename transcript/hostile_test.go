package transcript_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/transcript"
)

// Ids follow one rule on every platform: what Windows cannot name (its device
// names with any extension and in any case, an NTFS stream's ':', the
// characters it refuses, a trailing dot or space), control characters (C0,
// DEL, C1) and bidirectional controls are refused; names that only resemble
// them are not.
func TestTranscript_IDsFollowOneRuleOnEveryPlatform(t *testing.T) {
	refused := []string{
		"CON", "con", "Nul", "PRN", "aux", "COM1", "com9", "LPT1", "lpt9", "COM0", "COM¹",
		"CON.txt", "nul.json", "aux.tar.gz", "NUL .x", "CONIN$", "conout$",
		"a:b", "a<b", "a>b", `a"b`, "a|b", "a?b", "a*b",
		"agent.", "agent ", "agent. ", "a\tb", "a\x1bb", "a\x7fb",
		"a\u0085b", "a\u009bb", "a\u202eb", "a\u202ab", "a\u2066b", "a\u2069b", "a\u200eb", "a\u200fb", "a\u061cb",
	}
	for _, id := range refused {
		require.ErrorIs(t, transcript.ValidateID("agent id", id), transcript.ErrInvalidID, "%q", id)
	}
	accepted := []string{"CONSOLE", "COM10", "LPT", "connection", "nullable", "a.b", "agent-1_x", "задача", "a b", "COMx"}
	for _, id := range accepted {
		require.NoError(t, transcript.ValidateID("agent id", id), "%q", id)
	}

	s := newStore(t)
	err := s.Create(ctx, header("sess-id", "NUL", transcript.KindScheduled))
	require.ErrorIs(t, err, transcript.ErrInvalidID)
	require.NoDirExists(t, filepath.Join(s.Root(), "background", "sess-id"))
}

// Ids differing only in case would be one file on a case-insensitive
// filesystem: Create refuses the second, for an agent in its session's
// directory and for a session among the sessions, and writes nothing.
func TestTranscript_IDsDifferingOnlyInCaseAreRefusedAtCreate(t *testing.T) {
	s, _ := created(t, "sess-case", "agent-case", transcript.KindScheduled)

	err := s.Create(ctx, header("sess-case", "Agent-Case", transcript.KindScheduled))
	require.ErrorIs(t, err, transcript.ErrInvalidID)
	require.ErrorContains(t, err, `differs only in case from "agent-case"`)
	require.NoFileExists(t, filepath.Join(s.Root(), "background", "sess-case", "Agent-Case.events.jsonl"))

	err = s.Create(ctx, header("SESS-case", "agent-other", transcript.KindScheduled))
	require.ErrorIs(t, err, transcript.ErrInvalidID)
	require.ErrorContains(t, err, `differs only in case from "sess-case"`)
	require.NoDirExists(t, filepath.Join(s.Root(), "background", "SESS-case"))

	require.NoError(t, s.Create(ctx, header("sess-case", "agent-case-2", transcript.KindScheduled)))
}

// A symbolic link planted in place of a log is never opened for writing:
// Append refuses it, naming the path, and the file it points at keeps its
// bytes (before, Append opened it O_RDWR, cut its bytes after the last
// newline and appended an event to it). Reading it is refused the same way.
func TestTranscript_PlantedSymlinkLogIsRefusedNotWritten(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("creating a symbolic link needs a privilege on Windows")
	}
	s, _ := created(t, "sess-link", "agent-link", transcript.KindScheduled)
	p, err := s.PathsFor("sess-link", "agent-link")
	require.NoError(t, err)
	victim := filepath.Join(t.TempDir(), "victim.txt")
	original := "{\"seq\":0}\nthe host's own bytes, no newline at the end"
	require.NoError(t, os.WriteFile(victim, []byte(original), 0o600))
	require.NoError(t, os.Remove(p.Log))
	require.NoError(t, os.Symlink(victim, p.Log))

	err = s.Append(ctx, "sess-link", "agent-link", msg(transcript.AssistantMessage, "planted"))
	require.ErrorIs(t, err, transcript.ErrNotRegular)
	require.ErrorContains(t, err, p.Log+" is a symbolic link")
	b, err := os.ReadFile(victim)
	require.NoError(t, err)
	require.Equal(t, original, string(b))

	_, err = s.Load("sess-link", "agent-link")
	require.ErrorIs(t, err, transcript.ErrNotRegular)
	require.ErrorContains(t, err, p.Log)
	require.ErrorIs(t, s.Finish(ctx, "sess-link", "agent-link", transcript.End{Status: transcript.Completed}), transcript.ErrNotRegular)
	require.NoFileExists(t, p.Transcript)
}

// A session directory that is a symbolic link (to a directory holding a
// valid transcript) is refused by every read and write, never followed.
func TestTranscript_SymlinkedSessionDirectoryIsRefused(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("creating a symbolic link needs a privilege on Windows")
	}
	elsewhere, _ := created(t, "sess-real", "agent-x", transcript.KindScheduled)
	s := newStore(t)
	require.NoError(t, s.Create(ctx, header("sess-other", "agent-y", transcript.KindScheduled)))
	link := filepath.Join(s.Root(), "background", "sess-real")
	require.NoError(t, os.Symlink(filepath.Join(elsewhere.Root(), "background", "sess-real"), link))

	_, err := s.Load("sess-real", "agent-x")
	require.ErrorIs(t, err, transcript.ErrNotRegular)
	require.ErrorContains(t, err, link+" is a symbolic link, not a directory")
	require.ErrorIs(t, s.Append(ctx, "sess-real", "agent-x", msg(transcript.AssistantMessage, "m")), transcript.ErrNotRegular)
	require.ErrorIs(t, s.Create(ctx, header("sess-real", "agent-z", transcript.KindScheduled)), transcript.ErrNotRegular)
	_, err = s.List(ctx, "sess-real")
	require.ErrorIs(t, err, transcript.ErrNotRegular)
	sessions, err := s.Sessions()
	require.NoError(t, err)
	require.Equal(t, []string{"sess-other"}, sessions)
	require.NoFileExists(t, filepath.Join(elsewhere.Root(), "background", "sess-real", "agent-z.events.jsonl"))
}

// Every line read is bounded by MaxLine: a log line longer than it is
// reported with its path and line number, and a log of 256 MiB with no
// newline is read past without being held (allocation stays far below its
// size). Before, the line was read whole (541 MB for 256 MiB).
func TestTranscript_LinesLongerThanTheLimitAreReportedNotLoaded(t *testing.T) {
	s, _ := created(t, "sess-long", "agent-long", transcript.KindScheduled)
	p, err := s.PathsFor("sess-long", "agent-long")
	require.NoError(t, err)
	f, err := os.OpenFile(p.Log, os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = f.WriteString(`{"seq":1,"type":"assistant_message","text":"` + strings.Repeat("x", transcript.MaxLine) + "\"}\n")
	require.NoError(t, err)
	require.NoError(t, f.Close())
	_, err = s.Load("sess-long", "agent-long")
	require.ErrorIs(t, err, transcript.ErrLineTooLong)
	require.ErrorContains(t, err, p.Log+" line 2 is ")
	require.ErrorContains(t, err, "longer than the 16777216-byte limit")

	// 256 MiB of zeros, no newline (a sparse file: instant to make).
	nl := newStore(t)
	require.NoError(t, nl.Create(ctx, header("sess-nl", "agent-nl", transcript.KindScheduled)))
	q, err := nl.PathsFor("sess-nl", "agent-nl")
	require.NoError(t, err)
	require.NoError(t, os.Truncate(q.Log, 0))
	require.NoError(t, os.Truncate(q.Log, 256<<20))
	before := allocated()
	_, err = nl.Load("sess-nl", "agent-nl")
	require.ErrorIs(t, err, transcript.ErrCorrupt)
	require.ErrorContains(t, err, q.Log+" has no complete header line")
	grew := allocated() - before
	t.Logf("allocated %.1f MiB reading a 256 MiB line", float64(grew)/(1<<20))
	require.Less(t, grew, uint64(3*transcript.MaxLine), "reading a 256 MiB line")

	// The same line as the torn tail of a valid log: counted, not held.
	tl, _ := created(t, "sess-tl", "agent-tl", transcript.KindScheduled)
	r, err := tl.PathsFor("sess-tl", "agent-tl")
	require.NoError(t, err)
	fi, err := os.Stat(r.Log)
	require.NoError(t, err)
	require.NoError(t, os.Truncate(r.Log, fi.Size()+256<<20))
	before = allocated()
	tr, err := tl.Load("sess-tl", "agent-tl")
	require.NoError(t, err)
	require.Equal(t, 256<<20, tr.TornBytes)
	require.Less(t, allocated()-before, uint64(3*transcript.MaxLine))
}

func allocated() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.TotalAlloc
}

// Reads honour the context: a log being read (here 4 GiB with no newline)
// stops when its context is cancelled, with the context's error.
func TestTranscript_ReadsStopWhenTheContextEnds(t *testing.T) {
	s, _ := created(t, "sess-ctx", "agent-ctx", transcript.KindScheduled)
	p, err := s.PathsFor("sess-ctx", "agent-ctx")
	require.NoError(t, err)
	require.NoError(t, os.Truncate(p.Log, 4<<30))

	c, cancel := context.WithCancel(ctx)
	time.AfterFunc(100*time.Millisecond, cancel)
	done := make(chan error, 1)
	go func() {
		_, err := s.Open(c, "sess-ctx", "agent-ctx")
		done <- err
	}()
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(20 * time.Second):
		t.Fatal("Open did not stop when its context was cancelled")
	}

	// Each stops too, at the event it was given.
	ok, _ := created(t, "sess-each", "agent-each", transcript.KindScheduled)
	for range 3 {
		require.NoError(t, ok.Append(ctx, "sess-each", "agent-each", msg(transcript.AssistantMessage, "m")))
	}
	rd, err := ok.Open(ctx, "sess-each", "agent-each")
	require.NoError(t, err)
	defer rd.Close()
	c2, cancel2 := context.WithCancel(ctx)
	n := 0
	err = rd.Each(c2, func(transcript.Event) error { n++; cancel2(); return nil })
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, 1, n)
	require.True(t, errors.Is(err, context.Canceled))
}

// An event whose log line would be longer than MaxLine is refused by Append
// (ErrInvalidEvent), nothing written: every line the store writes, it reads.
func TestTranscript_AppendRefusesALineLongerThanTheLimit(t *testing.T) {
	s, _ := created(t, "sess-big", "agent-big", transcript.KindScheduled)
	// '<' is written as \u003c: 3 MiB of it makes an 18 MiB line.
	err := s.Append(ctx, "sess-big", "agent-big", msg(transcript.AssistantMessage, strings.Repeat("<", 3<<20)))
	require.ErrorIs(t, err, transcript.ErrInvalidEvent)
	require.ErrorContains(t, err, "longer than the 16777216-byte line limit")
	tr, err := s.Load("sess-big", "agent-big")
	require.NoError(t, err)
	require.Empty(t, tr.Events)
}

// Finish writes the document however long that takes past ctx's deadline
// (Record bounds each write's lifecycle record by one, 30 s by default, and
// a large transcript's document takes longer), and stops, publishing
// nothing, when ctx is cancelled.
func TestTranscript_FinishStopsWhenCancelledNotAtTheDeadline(t *testing.T) {
	s, _ := created(t, "sess-fin", "agent-fin", transcript.KindScheduled)
	require.NoError(t, s.Append(ctx, "sess-fin", "agent-fin", msg(transcript.AssistantMessage, "m")))
	p, err := s.PathsFor("sess-fin", "agent-fin")
	require.NoError(t, err)

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	require.ErrorIs(t, s.Finish(cancelled, "sess-fin", "agent-fin", transcript.End{Status: transcript.Completed}), context.Canceled)
	require.NoFileExists(t, p.Transcript)

	expired, cancel2 := context.WithDeadline(ctx, time.Now().Add(-time.Second))
	defer cancel2()
	require.NoError(t, s.Finish(expired, "sess-fin", "agent-fin", transcript.End{Status: transcript.Completed}))
	tr, err := s.Load("sess-fin", "agent-fin")
	require.NoError(t, err)
	require.Equal(t, transcript.Completed, tr.Status)
	require.Len(t, tr.Events, 1)
}
