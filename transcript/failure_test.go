package transcript_test

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/transcript"
)

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
	s := newStore(t)
	require.NoError(t, s.Create(ctx, header("sess-efbig", "agent-efbig", transcript.KindRunInBackground)))
	require.NoError(t, s.Append(ctx, "sess-efbig", "agent-efbig", msg(transcript.UserMessage, "before")))
	p, _ := s.PathsFor("sess-efbig", "agent-efbig")
	fi, err := os.Stat(p.Log)
	require.NoError(t, err)
	// Room for the first ~1.1 KiB line of the batch and part of the second.
	limit := fi.Size() + 1500
	require.Equal(t, "efbig", runRole(t, "append-fsize", s.Root(), "sess-efbig", "agent-efbig", strconv.FormatInt(limit, 10)))

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
