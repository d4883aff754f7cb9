package postgres

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The certificate's scope is bound as parameters; CatalogRead still takes
// only what CatalogScope writes, so a scope edited by hand never reaches the
// server's oid[] input (whose errors would cost every boot its fast path).
func TestOidArray_OnlyWhatCatalogScopeWrites(t *testing.T) {
	for s, want := range map[string]bool{
		"{}": true, "{1}": true, "{16384,4294967295}": true,
		"": false, "{": false, "1}": false, "{1": false, "{,}": false, "{1,}": false, "{01}": false,
		"{4294967296}": false, "{-1}": false, "{1 }": false, "{x}": false, "{1};{2}": false,
	} {
		require.Equal(t, want, oidArray(s), "%q", s)
	}
	_, _, ok := Driver{}.CatalogRead(nil, nil, "{1};{2};{3};{4}")
	require.True(t, ok)
	for _, scope := range []string{"", "{1};{2};{3}", "{1};{2};{3};{4};{5}", "{1};{2};{3};{4}' OR true --"} {
		_, _, ok := Driver{}.CatalogRead(nil, nil, scope)
		require.False(t, ok, "%q", scope)
	}
}
