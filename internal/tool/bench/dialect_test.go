package bench

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/internal/tool/dsn"
)

// A dialect other than the two is refused where the benchmark first meets
// it: it takes neither dialect's statements.
func TestBench_UnknownDialectIsAnError(t *testing.T) {
	_, err := StoresAt(dsn.Target{Dialect: "mysql", Path: "x.db"})
	require.ErrorContains(t, err, `unsupported dialect "mysql"`)
	_, err = Run(context.Background(), slotAt(dsn.Target{Dialect: "mysql", Path: "x.db"}), Config{})
	require.ErrorContains(t, err, `unsupported dialect "mysql"`)
	_, _, err = healthFloorQuery("mysql", "2026-01-01T00:00:00Z")
	require.ErrorContains(t, err, `unsupported dialect "mysql"`)
}
