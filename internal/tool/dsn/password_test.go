package dsn_test

import (
	neturl "net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/internal/tool/dsn"
)

// A malformed PostgreSQL URL is refused with a reason that repeats nothing
// of it: net/url's own messages quote the bytes they choke on, which can be
// a password's ("%ZZ" of "pa%ZZss", ":cd" of "ab/cd").
func TestParse_MalformedURLErrorHoldsNoPasswordByte(t *testing.T) {
	for _, c := range []struct{ dsn, password, reason string }{
		{"postgres://alice:pa%ZZss@db.example/kandev", "pa%ZZss", "'%' is not followed by two hexadecimal digits"},
		{"postgres://alice:ab/cd@db.example/kandev", "ab/cd", "the port is not a number"},
		{"postgres://alice:12/cd@db.example/kandev", "12/cd", "an '@' is not the one that ends the user and password"},
		{"postgres://alice:99999/cd@db.example/kandev", "99999/cd", "the port is not a number"},
		{"postgres://alice:s?cr@db.example/kandev", "s?cr", "the port is not a number"},
		{"postgres://alice:s#cr@db.example/kandev", "s#cr", "the port is not a number"},
		{"postgres://alice:p@ss@db.example/kandev", "p@ss", "an '@' is not the one"},
		{"postgres://alice:s e@db.example/kandev", "s e", ""},
		{"postgres://alice:q%@db.example/kandev", "q%", "'%' is not followed"},
	} {
		_, err := dsn.Parse(c.dsn)
		require.Error(t, err, c.dsn)
		msg := err.Error()
		require.Contains(t, msg, c.reason, c.dsn)
		requireNoPasswordByte(t, msg, c.password)
	}
}

// requireNoPasswordByte fails unless msg is one of the refusals, which are
// constant text, and holds no run of password of three bytes or more.
func requireNoPasswordByte(t *testing.T, msg, password string) {
	t.Helper()
	require.True(t, isRefusal(msg), "the message is one of the refusals, quoting nothing of the URL: %q", msg)
	for i := 0; i+3 <= len(password); i++ {
		require.NotContains(t, msg, password[i:i+3])
	}
}

// isRefusal reports whether msg is a PostgreSQL URL refusal, made of
// constant text alone.
func isRefusal(msg string) bool {
	for _, r := range dsn.Reasons {
		if msg == "--db: not a valid PostgreSQL URL: "+r {
			return true
		}
	}
	return false
}

// Whatever a PostgreSQL URL's password holds, Parse's error is one of the
// constant refusals, and a URL it accepts displays its password masked.
// The seed corpus is in testdata/fuzz/FuzzParse_PostgresPassword.
func FuzzParse_PostgresPassword(f *testing.F) {
	f.Fuzz(func(t *testing.T, user, password, rest string) {
		url := "postgres://" + user + ":" + password + "@" + rest
		tg, err := dsn.Parse(url)
		if err != nil {
			if !isRefusal(err.Error()) {
				t.Fatalf("Parse(%q): the error is not a constant refusal: %q", url, err)
			}
			return
		}
		// Accepted, the URL has one '@', which ends its user and password:
		// Display shows the user and the mask there, and the host, path and
		// query after it.
		userinfo, _, _ := strings.Cut(strings.TrimPrefix(tg.Display, "postgres://"), "@")
		if !strings.HasSuffix(userinfo, ":xxxxx") {
			t.Fatalf("Parse(%q): Display %q does not mask the password", url, tg.Display)
		}
		// And what precedes the mask is the user alone, as net/url escapes
		// it: nothing of the password is displayed beside it.
		u, err := neturl.Parse(url)
		if err != nil {
			t.Fatalf("Parse(%q) accepted what net/url refuses: %v", url, err)
		}
		if shown, want := strings.TrimSuffix(userinfo, ":xxxxx"), neturl.User(u.User.Username()).String(); shown != want {
			t.Fatalf("Parse(%q): Display %q shows %q before the mask, not the user %q", url, tg.Display, shown, want)
		}
	})
}
