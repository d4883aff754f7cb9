package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/internal/testkit/proctest"
)

// transcriptRSSBound is the most RSS a child process recording, showing or
// listing a transcript may reach, whatever the transcript's size.
const transcriptRSSBound = 64 << 20

// rssStream writes a provider stream of about size bytes to path: records of
// 1 MiB (assistant text and tool output, alternately), then the provider's
// terminal record.
func rssStream(t *testing.T, provider, path string, size int64) {
	t.Helper()
	f, err := os.Create(path)
	require.NoError(t, err)
	w := bufio.NewWriterSize(f, 1<<20)
	body := strings.Repeat("abcdefghijklmnopqrstuvwxyz0123456789 ", 1<<20/37)
	line := func(s string) { _, _ = w.WriteString(s + "\n") }
	switch provider {
	case "claude":
		line(`{"type":"system","subtype":"init","model":"claude-rss","session_id":"s"}`)
	case "codex":
		line(`{"type":"thread.started","thread_id":"t"}`)
		line(`{"type":"turn.started"}`)
	case "opencode":
		line(`{"type":"step_start","sessionID":"S","part":{"id":"ps","sessionID":"S","messageID":"m1","type":"step-start"}}`)
	}
	var written int64
	for i := 0; written < size; i++ {
		var s string
		id := fmt.Sprintf("call_%d", i)
		switch {
		case provider == "claude" && i%2 == 0:
			s = `{"type":"assistant","session_id":"s","message":{"content":[{"type":"text","text":"` + body + `"}]}}`
		case provider == "claude":
			line(`{"type":"assistant","session_id":"s","message":{"content":[{"type":"tool_use","id":"` + id + `","name":"Bash","input":{"command":"ls"}}]}}`)
			s = `{"type":"user","session_id":"s","message":{"content":[{"type":"tool_result","tool_use_id":"` + id + `","content":"` + body + `"}]}}`
		case provider == "codex" && i%2 == 0:
			s = `{"type":"item.completed","item":{"id":"` + id + `","type":"agent_message","text":"` + body + `"}}`
		case provider == "codex":
			line(`{"type":"item.started","item":{"id":"` + id + `","type":"command_execution","command":"ls","aggregated_output":"","exit_code":null,"status":"in_progress"}}`)
			s = `{"type":"item.completed","item":{"id":"` + id + `","type":"command_execution","command":"ls","aggregated_output":"` + body + `","exit_code":0,"status":"completed"}}`
		case i%2 == 0:
			s = `{"type":"text","sessionID":"S","part":{"id":"p` + id + `","sessionID":"S","messageID":"m1","type":"text","text":"` + body + `","time":{"start":1,"end":2}}}`
		default:
			s = `{"type":"tool_use","sessionID":"S","part":{"id":"t` + id + `","sessionID":"S","messageID":"m1","type":"tool","callID":"` + id + `","tool":"bash","state":{"status":"completed","input":{"command":"ls"},"output":"` + body + `"}}}`
		}
		line(s)
		written += int64(len(s) + 1)
	}
	switch provider {
	case "claude":
		line(`{"type":"result","subtype":"success","is_error":false,"result":"done","session_id":"s"}`)
	case "codex":
		line(`{"type":"item.completed","item":{"id":"last","type":"agent_message","text":"done"}}`)
		line(`{"type":"turn.completed","usage":{"input_tokens":1,"output_tokens":1}}`)
	case "opencode":
		line(`{"type":"text","sessionID":"S","part":{"id":"plast","sessionID":"S","messageID":"m1","type":"text","text":"done","time":{"start":1,"end":2}}}`)
		line(`{"type":"step_finish","sessionID":"S","part":{"id":"pf","sessionID":"S","messageID":"m1","type":"step-finish","reason":"stop"}}`)
	}
	require.NoError(t, w.Flush())
	require.NoError(t, f.Close())
}

// runMeasured runs bin with args, stdin from the file stdin ("" for none)
// and stdout to /dev/null, and returns its exit code, stderr and peak RSS.
func runMeasured(t *testing.T, bin, stdin string, args ...string) (int, string, int64) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	if stdin != "" {
		f, err := os.Open(stdin)
		require.NoError(t, err)
		defer f.Close()
		cmd.Stdin = f
	}
	devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	require.NoError(t, err)
	defer devnull.Close()
	var stderr strings.Builder
	cmd.Stdout, cmd.Stderr = devnull, &stderr
	floor, err := proctest.ResetPeak()
	require.NoError(t, err)
	t.Logf("this process's RSS before the child: %.1f MiB", float64(floor)/(1<<20))
	err = cmd.Run()
	if _, ok := err.(*exec.ExitError); !ok {
		require.NoError(t, err)
	}
	peak, ok := proctest.PeakRSS(cmd.ProcessState)
	require.True(t, ok)
	return cmd.ProcessState.ExitCode(), stderr.String(), peak
}

// Recording (which finishes the transcript: the log read back and written as
// the document), showing (text and --json, finished and still running) and
// listing a transcript of every provider take no more than 64 MiB of RSS
// in the child process, for a transcript of 64 MiB by default (holding it
// would take twice that: its events and the document's bytes), 1 GiB with
// SCHEMASTATE_TEST_TRANSCRIPT_RSS_MB=1024: memory follows the largest line
// (1 MiB here), not the transcript. Before, finishing a 300 MB Claude
// stream peaked at 2.1 GB and OpenCode at 2.18 GB; listing three 300 MB
// transcripts took 1.24 GB.
func TestCLI_TranscriptMemoryIsBoundedByTheLargestLine(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the CLI and writes transcripts of 64 MiB")
	}
	size := int64(proctest.SizeMB(t, "SCHEMASTATE_TEST_TRANSCRIPT_RSS_MB", 64))
	bin := cliBinary(t)
	for _, provider := range []string{"claude", "codex", "opencode"} {
		t.Run(provider, func(t *testing.T) {
			dir := t.TempDir()
			stream := filepath.Join(dir, provider+".jsonl")
			rssStream(t, provider, stream, size<<20)
			root := filepath.Join(dir, "conversation")
			measure := func(what, stdin string, wantCode int, args ...string) {
				t.Helper()
				start := time.Now()
				code, stderr, peak := runMeasured(t, bin, stdin, args...)
				t.Logf("%s %s, %d MiB: peak RSS %.1f MiB, %v", provider, what, size, float64(peak)/(1<<20), time.Since(start).Round(time.Millisecond))
				require.Equal(t, wantCode, code, "%s: %s", what, stderr)
				require.Less(t, peak, int64(transcriptRSSBound), "%s: peak RSS of the child", what)
			}
			measure("record (create, append, finish)", stream, exitOK, "transcript", "record", "--root", root,
				"--session", "sess-rss", "--agent", "agent-rss", "--provider", provider)
			doc := filepath.Join(root, "background", "sess-rss", "agent-rss.json")
			fi, err := os.Stat(doc)
			require.NoError(t, err)
			require.Greater(t, fi.Size(), size<<20, "the document holds the whole stream")
			measure("show", "", exitOK, "transcript", "show", doc)
			measure("show --json", "", exitOK, "transcript", "show", "--json", doc)
			measure("ls", "", exitOK, "transcript", "ls", "--root", root, "--session", "sess-rss")

			// The running log: the document removed, so show and ls read
			// and fold the log itself.
			require.NoError(t, os.Remove(doc))
			log := filepath.Join(root, "background", "sess-rss", "agent-rss.events.jsonl")
			measure("show (running log)", "", exitOK, "transcript", "show", log)
			measure("ls (running log)", "", exitOK, "transcript", "ls", "--root", root, "--session", "sess-rss")
		})
	}
}
