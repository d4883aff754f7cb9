package apisurface_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/internal/testkit/apisurface"
)

// The public packages, and what each exports (go test -v prints it).
var public = []string{"reconcile", "capture", "keys", "transcript", "health", "fanout", "backfill", "dialect", "drivers", "toolstatus", "."}

// reconcile exports what a host calls: at most 42 identifiers (the 41st and
// 42nd are WithAllowWriterBreak, the operator's override of the writers'
// check, and WithStatementTimeout, the budget a host behind a
// statement_timeout sets).
func TestSurface_ReconcileIsAHostsAPI(t *testing.T) {
	s, err := apisurface.Of(filepath.Join("..", "..", "..", "reconcile"))
	require.NoError(t, err)
	require.LessOrEqual(t, len(s.Identifiers), 42, "reconcile exports:\n%s", strings.Join(s.Identifiers, "\n"))
	for _, id := range s.Identifiers {
		require.NotContains(t, id, "Failpoint", "a test hook is no part of the host's API")
	}
}

func TestSurface_Counts(t *testing.T) {
	for _, p := range public {
		s, err := apisurface.Of(filepath.Join("..", "..", "..", p))
		require.NoError(t, err, p)
		t.Logf("%-10s %3d identifiers, %3d methods, %3d exported fields", p, len(s.Identifiers), len(s.Methods), s.Fields)
	}
}

// The counter counts: a package of known shape reads as written.
func TestSurface_CountsWhatIsExported(t *testing.T) {
	s, err := apisurface.Of(filepath.Join("testdata", "sample"))
	require.NoError(t, err)
	require.Equal(t, []string{"const A", "func F", "type T", "var V"}, s.Identifiers)
	require.Equal(t, []string{"T.M"}, s.Methods)
	require.Equal(t, 1, s.Fields)
}

// An alias of a type declared in one of the module's internal packages
// brings that type's exported fields and methods; an alias of another
// module's type brings only its name.
func TestSurface_AnAliasOfAnInternalTypeCountsItsFieldsAndMethods(t *testing.T) {
	s, err := apisurface.Of(filepath.Join("testdata", "aliased"))
	require.NoError(t, err)
	require.Equal(t, []string{"type B", "type T"}, s.Identifiers)
	require.Equal(t, []string{"T.M", "T.N"}, s.Methods)
	require.Equal(t, 2, s.Fields)
}
