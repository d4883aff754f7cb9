package transcript

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/schemastate/schemastate/transcript/internal/normalize"
)

// FuzzValidateID: an id ValidateID accepts is one path component that every
// platform can name as given: no separator, no Windows device name, none of
// the characters Windows refuses, no trailing dot or space, no control or
// bidirectional control character, valid UTF-8 of at most 200 bytes; and a
// file named by it plus a transcript suffix is found again under that name.
func FuzzValidateID(f *testing.F) {
	for _, s := range []string{"agent-1", "CON", "con.txt", "a:b", "a.", "a ", "..", ".x", "a/b", `a\b`, "COM1", "LPT9.json",
		"x\u202ey", "x\u0085y", "\x1b]52;c;aGk=\x07", "задача", "COM10", "a?b", "NUL .txt", "\xff"} {
		f.Add(s)
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, id string) {
		if ValidateID("id", id) != nil {
			return
		}
		base, _, _ := strings.Cut(id, ".")
		switch {
		case !utf8.ValidString(id), len(id) == 0, len(id) > maxIDLen:
			t.Fatalf("%q accepted: not 1-200 bytes of UTF-8", id)
		case strings.ContainsAny(id, `/\<>:"|?*`), strings.HasPrefix(id, "."):
			t.Fatalf("%q accepted: a separator, a character Windows refuses, or a leading dot", id)
		case strings.HasSuffix(id, ".") || strings.HasSuffix(id, " "):
			t.Fatalf("%q accepted: a trailing dot or space", id)
		case reservedOnWindows(base):
			t.Fatalf("%q accepted: a Windows device name", id)
		}
		for _, r := range id {
			if unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) {
				t.Fatalf("%q accepted: control character %U", id, r)
			}
		}
		name := filepath.Join(dir, id+logSuffix)
		if err := os.WriteFile(name, nil, 0o600); err != nil {
			t.Fatalf("%q accepted but cannot name a file: %v", id, err)
		}
		defer os.Remove(name)
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, e := range entries {
			found = found || e.Name() == id+logSuffix
		}
		if !found {
			t.Fatalf("%q accepted but its file is listed under another name", id)
		}
	})
}

// fuzzNormalizer feeds stream to provider's normalizer line by line: nothing
// panics, and every event it returns, from Feed or Close, is one Append
// accepts (a normalizer never hands the store an event it must refuse). The
// seeds are the records of the provider's streams in testdata, one or two
// at a time: small inputs keep each run of the fuzzer quick.
func fuzzNormalizer(f *testing.F, provider string, seeds ...string) {
	for _, s := range seeds {
		b, err := os.ReadFile(filepath.Join("..", "testdata", "transcripts", s))
		if err != nil {
			f.Fatal(err)
		}
		lines := bytes.Split(bytes.TrimSpace(b), []byte{'\n'})
		for i, l := range lines {
			if len(l) > 2048 {
				continue
			}
			f.Add(l)
			if i+1 < len(lines) && len(lines[i+1]) <= 2048 {
				f.Add(bytes.Join([][]byte{l, lines[i+1]}, []byte{'\n'}))
			}
		}
	}
	f.Fuzz(func(t *testing.T, stream []byte) {
		n, err := NewNormalizer(provider)
		if err != nil {
			t.Fatal(err)
		}
		check := func(evs []Event) {
			for _, e := range evs {
				if err := normalize.Validate(e); err != nil {
					t.Fatalf("%s normalizer returned an event Append refuses: %v (%+v)", provider, err, e)
				}
			}
		}
		for _, line := range bytes.Split(stream, []byte{'\n'}) {
			evs, err := n.Feed(line)
			if err != nil {
				continue // a line that does not decode is the stream's error, not a crash
			}
			check(evs)
		}
		evs, out := n.Close()
		check(evs)
		if !out.Status.Terminal() {
			t.Fatalf("%s outcome %q is not terminal", provider, out.Status)
		}
	})
}

func FuzzClaudeNormalizer(f *testing.F) {
	fuzzNormalizer(f, ProviderClaude, "claude_success.jsonl", "claude_subagent.jsonl", "claude_api_error_429.jsonl")
}

func FuzzCodexNormalizer(f *testing.F) {
	fuzzNormalizer(f, ProviderCodex, "codex_success.jsonl", "codex_failure.jsonl", "codex_error_then_completed.jsonl")
}

func FuzzOpenCodeNormalizer(f *testing.F) {
	fuzzNormalizer(f, ProviderOpenCode, "opencode_success.jsonl", "opencode_failure.jsonl", "opencode_global_event.jsonl", "opencode_shared_server.jsonl")
}
