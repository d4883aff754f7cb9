package transcript

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"
)

// ValidateID checks that id can be one path component, the same rule on
// every platform so that a transcript written on one opens on any other:
// non-empty, at most 200 bytes of UTF-8, not starting with '.' (which also
// excludes "." and ".."), without a trailing dot or space (Windows drops
// them), not a name Windows reserves for a device (CON, PRN, AUX, NUL,
// COM0-9, LPT0-9, with any extension, in any case), and free of path
// separators, the characters Windows refuses in a name (< > : " | ? *; ':'
// would name an NTFS stream), control characters (C0, DEL, C1) and the
// bidirectional controls (U+061C, U+200E, U+200F, U+202A-U+202E,
// U+2066-U+2069), which make a name read as another.
//
// Ids differing only in case would name one file on a case-insensitive
// filesystem: Create refuses an id whose file or directory exists under
// another case (ErrInvalidID).
func ValidateID(what, id string) error {
	bad := func(why string) error { return fmt.Errorf("%w: %s %q %s", ErrInvalidID, what, id, why) }
	switch {
	case id == "":
		return bad("is empty")
	case len(id) > maxIDLen:
		return bad(fmt.Sprintf("is longer than %d bytes", maxIDLen))
	case strings.HasPrefix(id, "."):
		return bad("must not start with '.' (path traversal)")
	case strings.ContainsAny(id, `/\`):
		return bad("must not contain a path separator")
	case !utf8.ValidString(id):
		return bad("is not UTF-8 (JSON could not carry it as named)")
	case strings.ContainsAny(id, `<>:"|?*`):
		return bad(`must not contain < > : " | ? * (Windows refuses them; ':' names an NTFS stream)`)
	case strings.HasSuffix(id, ".") || strings.HasSuffix(id, " "):
		return bad("must not end with a dot or a space (Windows drops them)")
	case reservedOnWindows(id):
		return bad("is a device name Windows reserves (CON, PRN, AUX, NUL, COM0-9, LPT0-9, with any extension)")
	}
	for _, r := range id {
		switch {
		case r < 0x20 || r == 0x7f || r >= 0x80 && r <= 0x9f:
			return bad("must not contain NUL or control characters")
		case r == 0x061c || r == 0x200e || r == 0x200f || r >= 0x202a && r <= 0x202e || r >= 0x2066 && r <= 0x2069:
			return bad("must not contain bidirectional control characters")
		}
	}
	return nil
}

// reservedOnWindows reports whether name, before its first dot and without
// trailing spaces, is a device name Windows reserves in every directory.
func reservedOnWindows(name string) bool {
	base, _, _ := strings.Cut(name, ".")
	base = strings.ToUpper(strings.TrimRight(base, " "))
	switch base {
	case "CON", "PRN", "AUX", "NUL", "CONIN$", "CONOUT$":
		return true
	}
	if len(base) >= 4 && (strings.HasPrefix(base, "COM") || strings.HasPrefix(base, "LPT")) {
		switch base[3:] {
		case "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "¹", "²", "³":
			return true
		}
	}
	return false
}

// caseTwins refuses the ids of p when a directory or transcript differing
// from them only in case exists (the session's directory among the
// sessions, the agent's files in the session's directory): on a
// case-insensitive filesystem they would be one. Two creates racing with
// such ids are not excluded.
func caseTwins(p Paths) error {
	sessionDir := filepath.Dir(p.Log)
	agent, _ := stem(filepath.Base(p.Log))
	for _, c := range []struct {
		dir, id, what string
		name          func(string) string
	}{
		{filepath.Dir(sessionDir), filepath.Base(sessionDir), "session id", func(n string) string { return n }},
		{sessionDir, agent, "agent id", func(n string) string { s, _ := stem(n); return s }},
	} {
		entries, err := os.ReadDir(c.dir)
		if err != nil {
			return nil // nothing there yet, or create itself reports what is wrong
		}
		for _, e := range entries {
			if n := c.name(e.Name()); n != c.id && strings.EqualFold(n, c.id) {
				return fmt.Errorf("%w: %s %q differs only in case from %q in %s (one name on a case-insensitive filesystem)",
					ErrInvalidID, c.what, c.id, n, c.dir)
			}
		}
	}
	return nil
}
