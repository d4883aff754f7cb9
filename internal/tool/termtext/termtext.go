// Package termtext makes text from outside (a provider's output, a row of the
// database) safe to print on a terminal: a control sequence in it is shown,
// never acted on.
package termtext

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Escape returns s with every character a terminal acts on written as a
// visible escape: C0 controls other than tab and newline (ESC, CR, BEL among
// them) and DEL as \xHH, C1 controls (U+0080–U+009F) as \uHHHH, and bytes
// that are not UTF-8 as \xHH. An OSC 52 sequence (ESC ] 52 ; c ; … BEL),
// which writes the terminal's clipboard, prints as \x1b]52;c;…\x07. The rest
// of s is unchanged, and s itself when nothing needs escaping.
func Escape(s string) string {
	i := firstUnsafe(s)
	if i < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	b.WriteString(s[:i])
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case unsafeRune(r):
			if r < 0x80 {
				fmt.Fprintf(&b, `\x%02x`, r)
			} else {
				fmt.Fprintf(&b, `\u%04x`, r)
			}
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// firstUnsafe is the offset of the first byte Escape changes, or -1.
func firstUnsafe(s string) int {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if unsafeRune(rune(c)) {
				return i
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 || unsafeRune(r) {
			return i
		}
		i += n
	}
	return -1
}

func unsafeRune(r rune) bool {
	return r < 0x20 && r != '\t' && r != '\n' || r == 0x7f || r >= 0x80 && r <= 0x9f
}
