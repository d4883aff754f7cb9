package termtext

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Escape shows every character a terminal acts on and leaves the rest,
// including tab, newline and non-ASCII text, byte for byte.
func TestEscape_ShowsControlCharactersLeavesTheRest(t *testing.T) {
	for in, want := range map[string]string{
		"plain text, tab\tand\nnewline, задача ✓": "plain text, tab\tand\nnewline, задача ✓",
		"\x1b]52;c;aGk=\x07":                      `\x1b]52;c;aGk=\x07`,
		"\x1b[31mred\x1b[0m":                      `\x1b[31mred\x1b[0m`,
		"a\rb\x00c\x7fd":                          `a\x0db\x00c\x7fd`,
		"csi \u009b1m nel \u0085":                 `csi \u009b1m nel \u0085`,
		"bad \xff\xc2 utf-8":                      `bad \xff\xc2 utf-8`,
		"":                                        "",
	} {
		require.Equal(t, want, Escape(in), "%q", in)
	}
}
