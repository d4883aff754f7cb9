package schemastate_test

import (
	"database/sql"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	// Every library package a host may import. This test binary imports
	// nothing else that registers handlers, so whatever is registered below
	// was registered by one of these on import.
	_ "github.com/schemastate/schemastate/backfill"
	_ "github.com/schemastate/schemastate/capture"
	_ "github.com/schemastate/schemastate/dialect"
	_ "github.com/schemastate/schemastate/health"
	_ "github.com/schemastate/schemastate/keys"
	_ "github.com/schemastate/schemastate/reconcile"
	_ "github.com/schemastate/schemastate/toolstatus"
	_ "github.com/schemastate/schemastate/transcript"
)

// Importing the module registers no database/sql driver: the host passes
// its own *sql.DB, opened with the drivers it imports itself, and a driver
// registered twice under one name panics. (The drivers package is the one
// that registers them, for the CLI; it is not imported here.)
func TestImport_NoDatabaseDriverRegistered(t *testing.T) {
	require.Empty(t, sql.Drivers())
}

// Importing the module changes nothing in the host's process: no handler on
// http.DefaultServeMux (importing expvar alone registers /debug/vars, which
// serves the command line and memstats), so nothing is published either —
// the counters reach expvar only through the host's own expvar.Publish.
func TestImport_NoHandlerOnHostMux(t *testing.T) {
	for _, path := range []string{"/debug/vars", "/debug/pprof/", "/"} {
		_, pattern := http.DefaultServeMux.Handler(httptest.NewRequest(http.MethodGet, path, nil))
		require.Empty(t, pattern, "importing the module registered %s on http.DefaultServeMux", path)
	}
}
