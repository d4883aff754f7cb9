package bench_test

import (
	"os"
	"testing"

	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/internal/testkit/proctest"
)

// TestMain gives this package's PostgreSQL tests a database of their own,
// and removes the binary the runs timed.
func TestMain(m *testing.M) { os.Exit(dbtest.Main(m, proctest.Cleanup)) }
