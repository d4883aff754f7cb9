package perdialect

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/dialect"
)

func TestFor_EachDialectItsOwnValue(t *testing.T) {
	o := Of[string]{Postgres: "pg", SQLite: "lite"}
	for d, want := range map[dialect.Dialect]string{dialect.Postgres: "pg", dialect.SQLite: "lite"} {
		got, err := o.For(d)
		require.NoError(t, err)
		require.Equal(t, want, got, d)
		require.Equal(t, want, o.Must(d), d)
		require.True(t, Is(d))
	}
}

func TestFor_UnknownDialectIsAnError(t *testing.T) {
	o := Of[string]{Postgres: "pg", SQLite: "lite"}
	got, err := o.For("mysql")
	require.True(t, errors.Is(err, ErrUnknown), "%v", err)
	require.ErrorContains(t, err, `"mysql"`)
	require.Empty(t, got, "an unknown dialect gets no dialect's value")
	require.False(t, Is("mysql"))
	require.PanicsWithValue(t, `perdialect: unsupported dialect "mysql"`, func() { o.Must("mysql") })
}
