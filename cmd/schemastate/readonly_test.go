package main

import (
	"context"
	"crypto/md5"
	"database/sql"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/tool/fixtures"
)

// fileState is a database file's bytes (md5) and the names in its directory,
// so a test sees any write to the file and any file created beside it (a
// journal, -wal or -shm).
type fileState struct {
	MD5     string
	Entries []string
}

func stateOf(t *testing.T, path string) fileState {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	sum := md5.Sum(b)
	entries, err := os.ReadDir(filepath.Dir(path))
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return fileState{MD5: hex.EncodeToString(sum[:]), Entries: names}
}

// journalMode reads the journal mode from the file header without opening
// it: bytes 18 and 19 are 1 for a rollback journal, 2 for WAL.
func journalMode(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(b), 100, "a SQLite header")
	switch {
	case b[18] == 1 && b[19] == 1:
		return "rollback"
	case b[18] == 2 && b[19] == 2:
		return "wal"
	}
	return "unknown"
}

// rollbackStore is the host's database as a host that never chose WAL keeps
// it: a rollback-journal SQLite file with the host tables, in a directory of
// its own.
func rollbackStore(t *testing.T) string {
	t.Helper()
	path := tempPath(t, "host.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(DELETE)")
	require.NoError(t, err)
	defer db.Close()
	script, err := fixtures.HostFixture(string(dialect.SQLite))
	require.NoError(t, err)
	require.NoError(t, fixtures.ApplyScript(context.Background(), db, script))
	require.NoError(t, db.Close())
	require.Equal(t, "rollback", journalMode(t, path))
	return path
}

// readCommands are the commands that only read, each as it is run against dsn.
func readCommands(dsn, root string) map[string][]string {
	return map[string][]string{
		"status":           {"status", "--db", dsn},
		"status --json":    {"status", "--db", dsn, "--json"},
		"health":           {"health", "--db", dsn, "--json"},
		"plan":             {"plan", "--db", dsn},
		"transcript ls":    {"transcript", "ls", "--root", root, "--session", "s1", "--db", dsn},
		"parity --against": {"parity", "--against", dsn},
		"subagents":        {"subagents", "--db", dsn},
		"subagents --json": {"subagents", "--db", dsn, "--session", "s1", "--json"},
	}
}

// `reconcile` never changes the host's journal mode: a rollback-journal file
// stays one after the rebuild, the key writes and the backfill.
func TestCLI_ReconcileKeepsJournalMode(t *testing.T) {
	path := rollbackStore(t)
	code, _, stderr := cli(t, "reconcile", "--db", "sqlite:"+path)
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, "rollback", journalMode(t, path))
}

// The read-only commands open SQLite read-only: on a rollback-journal file
// the file's bytes and its directory are exactly as they were (no switch to
// WAL, no journal, -wal or -shm left or created), and each command works.
func TestCLI_ReadOnlyCommandsLeaveTheFileAsItWas(t *testing.T) {
	path := rollbackStore(t)
	code, _, stderr := cli(t, "reconcile", "--db", "sqlite:"+path)
	require.Equal(t, exitOK, code, stderr)
	before := stateOf(t, path)
	for name, args := range readCommands("sqlite:"+path, t.TempDir()) {
		code, out, stderr := cli(t, args...)
		require.NotContains(t, stderr, "readonly", name)
		require.NotEqual(t, exitUsage, code, "%s: %s%s", name, out, stderr)
		require.Equal(t, before, stateOf(t, path), "%s changed the database file or its directory", name)
	}
	require.Equal(t, "rollback", journalMode(t, path))
}

// A 0-byte file is read as the empty database it is: it stays 0 bytes (no
// header written) and nothing is created beside it.
func TestCLI_ReadOnlyCommandsLeaveAnEmptyFileEmpty(t *testing.T) {
	path := tempPath(t, "empty.db")
	require.NoError(t, os.WriteFile(path, nil, 0o644))
	before := stateOf(t, path)
	for name, args := range readCommands("sqlite:"+path, t.TempDir()) {
		cli(t, args...)
		require.Equal(t, before, stateOf(t, path), "%s changed the empty file or its directory", name)
		fi, err := os.Stat(path)
		require.NoError(t, err)
		require.Zero(t, fi.Size(), name)
	}
}

// A read-only file in a read-only directory reads as sqlite3 reads it: each
// command gives the same exit code as on the writable file, and the bytes do
// not change. Tests run as root, whom permission bits do not stop, so the
// file and its directory are also made immutable (chattr +i), which refuses
// root's writes and new files too; where the filesystem has no such
// attribute only the bytes prove nothing was written.
func TestCLI_ReadOnlyCommandsWorkOnReadOnlyFileAndDirectory(t *testing.T) {
	path := rollbackStore(t)
	code, _, stderr := cli(t, "reconcile", "--db", "sqlite:"+path)
	require.Equal(t, exitOK, code, stderr)
	root := t.TempDir()
	want := map[string]int{}
	for name, args := range readCommands("sqlite:"+path, root) {
		want[name], _, _ = cli(t, args...)
	}
	dir := filepath.Dir(path)
	require.NoError(t, os.Chmod(path, 0o444))
	require.NoError(t, os.Chmod(dir, 0o555))
	t.Cleanup(func() { os.Chmod(dir, 0o755) })
	if immutable(t, path, dir) {
		_, err := os.OpenFile(path, os.O_WRONLY, 0)
		require.Error(t, err, "the immutable file refuses a writer, root included")
	}
	before := stateOf(t, path)
	for name, args := range readCommands("sqlite:"+path, root) {
		code, out, stderr := cli(t, args...)
		require.NotContains(t, stderr, "readonly", name)
		require.Equal(t, want[name], code, "%s: %s%s", name, out, stderr)
		require.Equal(t, before, stateOf(t, path), "%s changed the read-only file", name)
	}
}

// immutable sets the immutable attribute on paths (undone at cleanup) and
// reports whether it could.
func immutable(t *testing.T, paths ...string) bool {
	t.Helper()
	chattr, err := exec.LookPath("chattr")
	if err != nil {
		t.Log("no chattr: permission bits only")
		return false
	}
	for _, p := range paths {
		if out, err := exec.Command(chattr, "+i", p).CombinedOutput(); err != nil {
			t.Logf("chattr +i %s: %v %s: permission bits only", p, err, out)
			return false
		}
		t.Cleanup(func() { exec.Command(chattr, "-i", p).Run() })
	}
	return true
}

// A read-only command never creates the file it is pointed at.
func TestCLI_ReadOnlyCommandsNeverCreateAFile(t *testing.T) {
	path := tempPath(t, "typo.db")
	for name, args := range readCommands("sqlite:"+path, t.TempDir()) {
		code, _, _ := cli(t, args...)
		require.Equal(t, exitUsage, code, name)
		_, err := os.Stat(path)
		require.ErrorIs(t, err, os.ErrNotExist, name)
	}
}
