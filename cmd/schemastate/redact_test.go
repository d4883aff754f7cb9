package main

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const secret = "secretpw"

// malformedDSNs are the --db spellings an operator gets wrong, each carrying
// the password secretpw. None names a reachable database.
var malformedDSNs = []struct {
	name, dsn string
	// refused: rejected before any connection, naming the supported forms.
	refused bool
}{
	{"scheme typo", "postgress://postgres:" + secret + "@127.0.0.1:5432/no_such_db_x", true},
	{"mysql", "mysql://root:" + secret + "@127.0.0.1:3306/no_such_db_x", true},
	{"keyword form", "host=127.0.0.1 password=" + secret + " dbname=no_such_db_x", true},
	{"keyword form quoted", "host=127.0.0.1 password='" + secret + " x' dbname=no_such_db_x", true},
	{"upper-case scheme", "POSTGRES://postgres:" + secret + "@127.0.0.1:5432/no_such_db_x", false},
	{"unclosed IPv6 bracket", "postgres://postgres:" + secret + "@[::1:5432/no_such_db_x", false},
	{"bad port", "postgres://postgres:" + secret + "@127.0.0.1:99999/no_such_db_x", false},
	{"non-numeric port", "postgres://postgres:" + secret + "@127.0.0.1:abc/no_such_db_x", false},
	{"bad escape", "postgres://postgres:" + secret + "%zz@127.0.0.1:5432/no_such_db_x", false},
	{"password in query", "postgres://postgres@127.0.0.1:5432/no_such_db_x?password=" + secret + "&sslmode=disable", false},
	{"driver parse error", "postgres://postgres:" + secret + "@127.0.0.1:5432/no_such_db_x?connect_timeout=abc", false},
}

// dbCommands are every subcommand that takes --db, with the other arguments
// each needs to get as far as opening it.
func dbCommands(root string) map[string][]string {
	return map[string][]string{
		"reconcile":          {"reconcile"},
		"plan":               {"plan"},
		"status":             {"status"},
		"health":             {"health"},
		"ingest":             {"ingest"},
		"demo":               {"demo"},
		"generate":           {"generate", "--scale-mb", "1"},
		"bench":              {"bench", "--rows", "300", "--messages", "0", "--runs", "1"},
		"parity":             {"parity"},
		"parity --against":   {"parity", "--against"},
		"transcript ls":      {"transcript", "ls", "--root", root, "--session", "s"},
		"transcript record":  {"transcript", "record", "--root", root, "--session", "s", "--agent", "a", "--provider", "claude"},
		"transcript recover": {"transcript", "recover", "--root", root},
	}
}

// Issue 12 §1: no subcommand prints a password from a malformed DSN — not on
// stdout, not on stderr, not in --json — and a DSN that is not one of the
// supported forms is refused, never opened (or created) as a SQLite file.
func TestCLI_SecretsNeverPrinted(t *testing.T) {
	t.Setenv("PGPASSWORD", "")
	dir := t.TempDir()
	t.Chdir(dir)
	root := t.TempDir()
	for name, argv := range dbCommands(root) {
		for _, f := range malformedDSNs {
			for _, asJSON := range []bool{false, true} {
				args := append(append([]string{}, argv...), f.dsn)
				if argv[len(argv)-1] != "--against" {
					args = append(append([]string{}, argv...), "--db", f.dsn)
				}
				if asJSON && name != "transcript record" {
					args = append(args, "--json")
				}
				code, out, errOut := cli(t, args...)
				label := name + " / " + f.name
				require.Equal(t, exitUsage, code, "%s: %s%s", label, out, errOut)
				require.NotContains(t, out, secret, label)
				require.NotContains(t, errOut, secret, label)
				require.NotContains(t, out+errOut, "secret", label)
				if f.refused {
					require.Contains(t, errOut, "postgres://", "%s: the message names the supported forms", label)
				}
			}
		}
	}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries, "no DSN was taken for a SQLite file name")
}

// PGPASSWORD is masked wherever a message repeats it, and so is a
// password= value in any message, whoever wrote it.
func TestCLI_PGPasswordNeverPrinted(t *testing.T) {
	t.Setenv("PGPASSWORD", secret)
	code, out, errOut := cli(t, "status", "--db", "postgres://postgres@127.0.0.1:5432/no_such_db_x?application_name="+secret)
	require.Equal(t, exitUsage, code)
	require.NotContains(t, out+errOut, secret)
	require.Contains(t, errOut, "no_such_db_x", "the message still says which database")
}

func TestCLI_UpperCaseSchemeIsPostgres(t *testing.T) {
	code, _, errOut := cli(t, "status", "--db", "POSTGRESQL://postgres@127.0.0.1:5432/no_such_db_x?sslmode=disable")
	require.Equal(t, exitUsage, code)
	require.True(t, strings.Contains(errOut, "no_such_db_x") && !strings.Contains(errOut, "no such database file"), errOut)
}
