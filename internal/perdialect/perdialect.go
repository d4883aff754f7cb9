// Package perdialect holds a value that differs by dialect, chosen once. A
// package writes what differs as an Of and asks For the caller's dialect,
// instead of branching on the dialect where the value is used: a dialect the
// value has no entry for is an error, never another dialect's value.
package perdialect

import (
	"errors"
	"fmt"

	"github.com/schemastate/schemastate/dialect"
)

// ErrUnknown is wrapped by For's error for a dialect other than the two.
var ErrUnknown = errors.New("unsupported dialect")

// Of is one value per dialect.
type Of[T any] struct {
	Postgres, SQLite T
}

// For is the value for d; any other dialect than the two is an error
// wrapping ErrUnknown.
func (o Of[T]) For(d dialect.Dialect) (T, error) {
	switch d {
	case dialect.Postgres:
		return o.Postgres, nil
	case dialect.SQLite:
		return o.SQLite, nil
	}
	var zero T
	return zero, fmt.Errorf("%w %q", ErrUnknown, d)
}

// Must is the value for d, for a dialect that has already been checked (by
// dialect.Detect or an earlier For): it panics on any other dialect, so a
// third dialect fails loudly where it reaches code that has no value for it.
func (o Of[T]) Must(d dialect.Dialect) T {
	v, err := o.For(d)
	if err != nil {
		panic("perdialect: " + err.Error())
	}
	return v
}

// All are the dialects every Of has a value for, in a fixed order.
func All() []dialect.Dialect { return []dialect.Dialect{dialect.SQLite, dialect.Postgres} }

// Is reports whether d is one of All.
func Is(d dialect.Dialect) bool {
	_, err := Of[struct{}]{}.For(d)
	return err == nil
}
