package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/internal/tool/compat"
)

// turnIDNotNullFile writes the edit of issue's reproduction: turn_id NOT
// NULL with a default, "every row gets a turn".
func turnIDNotNullFile(t *testing.T) string {
	t.Helper()
	return tempFile(t, "edited.hcl", dbtest.TurnIDNotNull(t))
}

// compat on this repository's own history passes; an edit the base
// release's writer cannot write exits 1, naming the lost frame by file and
// line; a missing base is a usage error. On both dialects.
func TestCLI_Compat_ExitCodesAndLostFrames(t *testing.T) {
	for _, d := range []dialect.Dialect{dialect.SQLite, dialect.Postgres} {
		t.Run(string(d), func(t *testing.T) {
			args := []string{"compat", "--base-git", "HEAD", "--frames", corpus}
			if d == dialect.Postgres {
				dbtest.Open(t, d)
				args = append(args, "--db", dbtest.PostgresDSN())
			}
			code, out, errOut := cli(t, args...)
			require.Equal(t, exitOK, code, "%s\n%s", out, errOut)
			require.Contains(t, out, "new shape, base writer")
			require.Contains(t, out, "base shape, new writer")

			code, out, _ = cli(t, append(args, "--schema", turnIDNotNullFile(t), "--json")...)
			require.Equal(t, 1, code)
			var rep compat.Report
			decodeJSON(t, out, &rep)
			require.False(t, rep.Compatible())
			var lost []compat.Failure
			for _, r := range rep.Runs {
				if r.Scenario == compat.NewShapeBaseWriter {
					require.Contains(t, r.Refused, "turn_id")
					lost = append(lost, r.Failures...)
				}
			}
			require.NotEmpty(t, lost)
			require.Equal(t, 37, lost[0].Line)
			require.True(t, strings.HasSuffix(lost[0].File, "stream.ndjson"), lost[0].File)
		})
	}
	code, _, errOut := cli(t, "compat", "--frames", corpus)
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "name the base release")
	code, _, errOut = cli(t, "compat", "--base-git", "no-such-ref-anywhere", "--frames", corpus)
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "no-such-ref-anywhere")
}

// lint --base-git REF judges the edit against the base release's writer
// (REF:writers.json) as well as this release's, naming each.
func TestCLI_Lint_NamesBothReleasesWriters(t *testing.T) {
	code, out, errOut := cli(t, "lint", "--base-git", "HEAD", "--dialect", "sqlite", turnIDNotNullFile(t))
	require.Equal(t, 1, code, errOut)
	require.Contains(t, out, "REFUSED writer-not-null")
	require.Contains(t, out, "this release's writer (capture, writers.json (built in))")
	require.Contains(t, out, "the base release's writer (capture, HEAD:writers.json)")
	require.Contains(t, out, "frames that report no turn id")
	require.Contains(t, out, "two releases, writer first")
}

// status says whether this release's live writer starts on the table as it
// is, and why not: after a boot that applied a breaking edit (the
// operator's override), it names the break. Both dialects.
func TestCLI_Status_SaysWhetherTheLiveWriterStarts(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		reconciledByCLI(t, db)
		code, out, _ := cli(t, "status", "--db", db.CLIDSN, "--json")
		require.Equal(t, exitOK, code)
		var st struct {
			LiveWriter struct {
				Starts  bool   `json:"starts"`
				Refused string `json:"refused"`
			} `json:"live_writer"`
		}
		decodeJSON(t, out, &st)
		require.True(t, st.LiveWriter.Starts, out)

		code, _, errOut := cli(t, "reconcile", "--db", db.CLIDSN, "--schema", turnIDNotNullFile(t))
		require.Equal(t, exitStepFailed, code, "the breaking edit is refused: %s", errOut)
		code, _, errOut = cli(t, "reconcile", "--db", db.CLIDSN, "--schema", turnIDNotNullFile(t), "--allow-writer-break")
		require.Equal(t, exitOK, code, errOut)
		code, out, _ = cli(t, "status", "--db", db.CLIDSN, "--schema", turnIDNotNullFile(t))
		require.Equal(t, exitOK, code)
		require.Contains(t, out, "live writer: REFUSES TO START")
		require.Contains(t, out, "turn_id")
	})
}
