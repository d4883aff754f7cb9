package dbtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate"
)

// SchemaRepo is a git repository in a new temporary directory whose one
// commit holds the built-in schema.hcl: the base release that lint's and
// compat's --base-git read. git runs git in it (an identity given, no
// signing), failing t on an error.
func SchemaRepo(t testing.TB) (dir string, git func(args ...string)) {
	t.Helper()
	dir = t.TempDir()
	git = func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false"}, args...)...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
	}
	git("init", "-q")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "schema.hcl"), schemastate.SchemaHCL, 0o644))
	git("add", "schema.hcl")
	git("commit", "-q", "-m", "base")
	return dir, git
}
