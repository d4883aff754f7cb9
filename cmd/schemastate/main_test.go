package main

import (
	"os"
	"testing"

	"github.com/schemastate/schemastate/internal/dbtest"
)

// TestMain gives this package's PostgreSQL tests a database of their own,
// and removes the binary cliBinary built: one per run of the package, tens of
// MiB each, would otherwise pile up in the temporary directory.
func TestMain(m *testing.M) {
	code := dbtest.Main(m)
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}
