package backfill

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/dialect"
)

var updateStatements = flag.Bool("update-statements", false, "rewrite testdata/statements.golden from the statements built now")

// The statements Run executes are pinned byte for byte, for both dialects
// and for the default and a small metadata limit: a change to how they are
// built that changes their text fails here, and a deliberate one rewrites
// the file with -update-statements and shows up in its diff.
func TestBackfill_StatementTextIsPinned(t *testing.T) {
	var b strings.Builder
	for _, d := range []dialect.Dialect{dialect.SQLite, dialect.Postgres} {
		for _, maxMeta := range []int64{MaxMetadata, 4096} {
			s := dialects.Must(d)(maxMeta)
			fmt.Fprintf(&b, "==== %s, maxMeta %d\n", d, maxMeta)
			for i, p := range s.prepare {
				fmt.Fprintf(&b, "---- prepare[%d]\n%s\n", i, p)
			}
			fmt.Fprintf(&b, "---- winners\n%s\n---- fast\n%s\n---- max\n%s\n---- insert\n%s\n", s.winners, s.fast, s.max, s.insert)
			for i, c := range s.cleanup {
				fmt.Fprintf(&b, "---- cleanup[%d]\n%s\n", i, c)
			}
		}
	}
	const golden = "testdata/statements.golden"
	if *updateStatements {
		require.NoError(t, os.MkdirAll("testdata", 0o755))
		require.NoError(t, os.WriteFile(golden, []byte(b.String()), 0o644))
		return
	}
	want, err := os.ReadFile(golden)
	require.NoError(t, err)
	require.Equal(t, string(want), b.String(), "the backfill's statements changed: go test -run TestBackfill_StatementTextIsPinned -update-statements ./backfill/")
}
