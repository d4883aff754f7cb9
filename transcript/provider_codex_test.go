package transcript_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/transcript"
)

// `codex exec --json` prints a top-level "error" record for every error the
// run reports, fatal or retried, without saying which (the retry flag is not
// in the JSONL). A run that reported an error is never recorded as a
// success: when turn.completed follows, the outcome is failed, its error
// names the reported error and that the turn completed after it, and the
// transcript keeps the agent's answer and tool results as they were.
func TestTranscript_CodexErrorThenTurnCompletedIsFailed(t *testing.T) {
	tr, out := feed(t, transcript.ProviderCodex, fixtureLines(t, "codex_error_then_completed.jsonl")...)
	require.Equal(t, transcript.Failed, out.Status)
	require.Contains(t, out.Error, "Reconnecting... 1/5 (stream disconnected before completion")
	require.Contains(t, out.Error, "turn.completed")
	require.Equal(t, "`go vet ./keys` passes with no findings.", out.FinalText)
	require.Equal(t, out.FinalText, tr.FinalResponse())
	calls := tr.ToolCalls()
	require.Len(t, calls, 1)
	require.NotNil(t, calls[0].Result)
	require.False(t, calls[0].Result.IsError, "the run's error is not the tool's")
}

// An outcome and its error text agree, for every provider fixture (each
// testdata/transcripts/PROVIDER_….jsonl, read as PROVIDER's stream): a
// completed outcome carries no error, a failed one always says why.
func TestTranscript_OutcomeAndErrorTextAgree(t *testing.T) {
	paths, err := filepath.Glob(fixturePath("*.jsonl"))
	require.NoError(t, err)
	require.NotEmpty(t, paths)
	for _, p := range paths {
		name := filepath.Base(p)
		provider, _, _ := strings.Cut(name, "_")
		require.Contains(t, transcript.Providers(), provider, "%s is no provider's fixture", name)
		t.Run(name, func(t *testing.T) {
			_, out, err := transcript.Normalize(provider, fixture(t, name))
			require.NoError(t, err)
			require.True(t, out.Status.Terminal(), out.Status)
			if out.Status == transcript.Completed {
				require.Empty(t, out.Error, "a completed outcome carries an error")
			} else {
				require.NotEmpty(t, out.Error, "a %s outcome without its error", out.Status)
			}
		})
	}
}
