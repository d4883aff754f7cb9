package capture

import (
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// ErrUnstorableText is returned by Record for a frame whose identity — its
// session_id, task_id, execution_id or tool_call_id — holds a NUL or bytes
// that are not UTF-8 (on the wire, also a lone surrogate escape). No row was
// written.
//
// The rule is the same on both dialects and on both paths (Record and the
// NDJSON ingest): such a frame is refused whole, never altered. PostgreSQL
// cannot hold a NUL in TEXT at all, and SQLite would keep bytes PostgreSQL
// refuses, so storing it would give a row on one dialect and none on the
// other; replacing the bytes would let two different identities (tc-\xff,
// tc-\xfe) land on one row; and an identity has no NULL to fall back on.
//
// A descriptive field with such text does not cost the frame its row (AC-1):
// that field alone is stored NULL (dropUnstorable).
var ErrUnstorableText = errors.New("capture: frame identity holds a NUL or is not UTF-8")

// textField is one stored text value of a frame, by its wire name.
type textField struct {
	name, value string
}

// identityText lists the frame's identity values: what makes its row
// joinable, so what cannot be stored NULL or altered.
func identityText(f Frame) []textField {
	return []textField{
		{"session_id", f.SessionID}, {"task_id", f.TaskID},
		{"execution_id", f.ExecutionID}, {"tool_call_id", f.ToolCallID},
	}
}

// descriptiveText lists the frame's other stored text values, each by a
// pointer into f so that one can be dropped. Prompt, ResultText and
// OutputFile are never stored, so they are not checked.
func descriptiveText(f *Frame) []struct {
	name string
	v    *string
} {
	p := &f.Subagent
	return []struct {
		name string
		v    *string
	}{
		{"turn_id", &f.TurnID}, {"parent_tool_call_id", &f.ParentToolCallID}, {"tool_status", &f.ToolStatus},
		{"subagent_task.description", &p.Description}, {"subagent_task.subagent_type", &p.SubagentType},
		{"subagent_task.status", &p.Status}, {"subagent_task.agent_id", &p.AgentID},
		{"subagent_task.model", &p.Model}, {"subagent_task.child_session_id", &p.ChildSessionID},
	}
}

// droppedText is a descriptive field stored NULL because its text cannot be
// stored exactly: its wire name, why, and a short quoted excerpt of it.
type droppedText struct {
	field, why, excerpt string
}

// checkIdentity returns why f's identity cannot be stored exactly, or nil.
func checkIdentity(f Frame) error {
	for _, t := range identityText(f) {
		if why := goTextProblem(t.value); why != "" {
			return fmt.Errorf("%w: field %s %s: %s", ErrUnstorableText, t.name, excerpt(t.value), why)
		}
	}
	return nil
}

// dropUnstorable returns f with every descriptive field whose text cannot be
// stored exactly (a NUL, bytes that are not UTF-8) set to "" — not reported,
// so stored NULL on a new row and never blanking a value an earlier frame
// stored (AC-4) — and lists them, after those ParseFrame already dropped.
// Nothing is altered or escaped: the value is stored whole or not at all, the
// same on both dialects, and every other field is kept.
func dropUnstorable(f Frame) (Frame, []droppedText) {
	dropped := f.dropped
	f.dropped = nil
	for _, t := range descriptiveText(&f) {
		if why := goTextProblem(*t.v); why != "" {
			dropped = append(dropped, droppedText{field: t.name, why: why, excerpt: excerpt(*t.v)})
			*t.v = ""
		}
	}
	return f, dropped
}

// goTextProblem says why a Go string cannot be stored exactly, or "".
func goTextProblem(s string) string {
	for i := 0; i < len(s); {
		c := s[i]
		if c == 0 {
			return fmt.Sprintf("NUL at byte %d", i)
		}
		if c < utf8.RuneSelf {
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			return fmt.Sprintf("byte 0x%02x at %d is not UTF-8", c, i)
		}
		i += size
	}
	return ""
}

// rawTextProblem says why a JSON string literal (quotes included, syntax
// already checked by the decoder) cannot be stored exactly, or "". It reads
// the raw bytes because encoding/json turns invalid UTF-8 and lone surrogate
// escapes into U+FFFD: after decoding, "tc-\xff" and "tc-\xfe" are one value.
func rawTextProblem(raw []byte) string {
	end := len(raw) - 1 // the closing quote
	for i := 1; i < end; {
		c := raw[i]
		switch {
		case c == '\\' && raw[i+1] == 'u':
			r := hex4(raw[i+2 : i+6])
			switch {
			case r == 0:
				return fmt.Sprintf(`\u0000 (NUL) at byte %d`, i-1)
			case r >= 0xD800 && r < 0xDC00:
				// A high surrogate must be followed by an escaped low one.
				if i+12 <= end && raw[i+6] == '\\' && raw[i+7] == 'u' {
					if lo := hex4(raw[i+8 : i+12]); lo >= 0xDC00 && lo < 0xE000 {
						i += 12
						continue
					}
				}
				return fmt.Sprintf(`lone surrogate \u%04x at byte %d`, r, i-1)
			case r >= 0xDC00 && r < 0xE000:
				return fmt.Sprintf(`lone surrogate \u%04x at byte %d`, r, i-1)
			}
			i += 6
		case c == '\\':
			i += 2
		case c < utf8.RuneSelf:
			i++
		default:
			r, size := utf8.DecodeRune(raw[i:end])
			if r == utf8.RuneError && size == 1 {
				return fmt.Sprintf("byte 0x%02x at %d is not UTF-8", c, i-1)
			}
			i += size
		}
	}
	return ""
}

// hex4 reads four hex digits (validated by the decoder's scanner).
func hex4(b []byte) rune {
	var r rune
	for _, c := range b {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		}
	}
	return r
}

// excerptLen is how much of a value a message quotes.
const excerptLen = 48

// excerpt quotes at most the first excerptLen bytes of s (cut on a rune
// boundary when s is UTF-8), and says how long s is when it was cut, so a
// message about a huge value stays short. Invalid bytes are shown as \xHH.
func excerpt(s string) string {
	if len(s) <= excerptLen {
		return strconv.Quote(s)
	}
	cut := excerptLen
	for cut > excerptLen-utf8.UTFMax && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + fmt.Sprintf("… (%d bytes)", len(s))
}

// clip cuts an already-formatted message to at most n bytes.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > n-utf8.UTFMax && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + fmt.Sprintf("… (%d bytes)", len(s))
}
