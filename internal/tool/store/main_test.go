package store_test

import (
	"os"
	"testing"

	"github.com/schemastate/schemastate/internal/testkit/dbtest"
)

// TestMain gives this package's PostgreSQL tests a database of their own.
func TestMain(m *testing.M) { os.Exit(dbtest.Main(m)) }
