package transcript_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/transcript"
)

const (
	openCodeChildSession = "ses_4e7b2c9d1aa0Kq3wE5rT7yU9iO"
	openCodeChildPrompt  = "Read keys/keys.go and tell me what WriteOnce does on a conflict."
	openCodeOtherPrompt  = "Validate the measurement pipeline against yesterday's export."
	openCodeChildFinal   = "WriteOnce inserts with ON CONFLICT DO NOTHING, so on a conflict it keeps the value already stored and reports that it did not write."
)

// One OpenCode server's /event stream carries every session it runs. Given
// the child's session id, the normalizer keeps only that session's events:
// another child's prompt, messages, tool calls, model, error and idle on the
// same server are not this child's — the other session failing (and going
// idle first) neither fails nor ends this one.
func TestTranscript_OpenCodeKeepsOnlyTheChildsSession(t *testing.T) {
	lines := fixtureLines(t, "opencode_shared_server.jsonl")
	n, err := transcript.NewNormalizer(transcript.ProviderOpenCode, transcript.WithSession(openCodeChildSession))
	require.NoError(t, err)
	tr, out := feedTo(t, transcript.ProviderOpenCode, n, lines...)
	require.Equal(t, transcript.Completed, out.Status, out.Error)
	require.Empty(t, out.Error)
	require.Equal(t, "claude-sonnet-4-5", out.Model)
	require.Equal(t, openCodeChildFinal, out.FinalText)
	require.Equal(t, []eventRow{
		{Type: transcript.UserMessage, What: openCodeChildPrompt},
		{Type: transcript.AssistantMessage, What: "I'll read keys.go."},
		{Type: transcript.ToolCall, What: "read"},
		{Type: transcript.AssistantMessage, What: openCodeChildFinal},
	}, eventRows(tr))
	read := tr.ToolCalls()[0]
	require.NotNil(t, read.Result)
	require.False(t, read.Result.IsError)
	require.Contains(t, read.Result.Output, "ON CONFLICT DO NOTHING")
	require.Equal(t, openCodeChildFinal, tr.FinalResponse())

	// Without the session id the normalizer cannot tell the sessions apart
	// (its documented behaviour): both children's traffic lands here, and
	// the other child's error fails this one. The fixture really mixes them.
	tr, out = feed(t, transcript.ProviderOpenCode, lines...)
	require.Equal(t, transcript.Failed, out.Status)
	require.Contains(t, out.Error, "Rate limit reached for gpt-5")
	require.Contains(t, eventRows(tr), eventRow{Type: transcript.UserMessage, What: openCodeOtherPrompt})
}

// Normalize takes the same options as NewNormalizer.
func TestTranscript_NormalizeTakesTheChildsSession(t *testing.T) {
	evs, out, err := transcript.Normalize(transcript.ProviderOpenCode, fixture(t, "opencode_shared_server.jsonl"),
		transcript.WithSession(openCodeChildSession))
	require.NoError(t, err)
	require.Equal(t, transcript.Completed, out.Status, out.Error)
	for _, e := range evs {
		require.NotEqual(t, openCodeOtherPrompt, e.Text)
	}
}

// An OpenCode session.error that names no session (the server raises one
// outside any session, e.g. a skill file that fails to parse) may concern the
// child: with the child's session id given it is still kept, so a failure is
// never filtered into a success.
func TestTranscript_OpenCodeSessionlessErrorStillFailsTheChild(t *testing.T) {
	n, err := transcript.NewNormalizer(transcript.ProviderOpenCode, transcript.WithSession(openCodeChildSession))
	require.NoError(t, err)
	_, out := feedTo(t, transcript.ProviderOpenCode, n,
		`{"type":"message.updated","properties":{"info":{"id":"msg_a1","sessionID":"`+openCodeChildSession+`","role":"user","time":{"created":1787246200101}}}}`,
		`{"type":"message.part.updated","properties":{"part":{"id":"prt_a2","sessionID":"`+openCodeChildSession+`","messageID":"msg_a1","type":"text","text":"hi"}}}`,
		`{"type":"session.error","properties":{"error":{"name":"UnknownError","data":{"message":"Failed to parse skill .opencode/skill/release/SKILL.md"}}}}`,
		`{"type":"session.idle","properties":{"sessionID":"`+openCodeChildSession+`"}}`)
	require.Equal(t, transcript.Failed, out.Status)
	require.Contains(t, out.Error, "Failed to parse skill")
}
