package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// The files the tests hand the CLI: the shipped frames, and files of their
// own in temporary directories.

// corpus is the frame corpus this repository ships (testdata/frames), and
// shippedStream its realistic session's stream.
const corpus = "../../testdata/frames"

var shippedStream = filepath.Join(corpus, "stream.ndjson")

// tempFile writes data to a file named name in a new temporary directory
// and returns its path.
func tempFile(t *testing.T, name string, data []byte) string {
	t.Helper()
	path := tempPath(t, name)
	require.NoError(t, os.WriteFile(path, data, 0o644))
	return path
}

// tempPath is a path in a new temporary directory, where nothing is yet.
func tempPath(t *testing.T, elem ...string) string {
	return filepath.Join(append([]string{t.TempDir()}, elem...)...)
}
