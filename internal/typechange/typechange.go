// Package typechange judges a column's type change: whether every stored
// value survives it (Widens), whether the reconcile refuses it as
// destroying data (Destructive), how the dialect spells a type (Name), and
// which changes PostgreSQL makes in the catalog alone (BinaryCoercible,
// TimeKind, TimePrecision: pgtypes.go), as the planner and lint both read
// them.
package typechange

import (
	"fmt"
	"strings"

	"ariga.io/atlas/sql/postgres"
	"ariga.io/atlas/sql/schema"
	"ariga.io/atlas/sql/sqlite"

	"github.com/schemastate/schemastate/dialect"
)

// Destructive reports whether the shape step refuses c on dialect d because
// it would destroy data, and says why. Such changes are refused at boot and
// reported by name; nothing the declaration merely dropped is ever dropped
// from a live database.
func Destructive(d dialect.Dialect, c schema.Change) (why string, refused bool) {
	switch c := c.(type) {
	case *schema.DropTable:
		return "would drop table " + c.T.Name, true
	case *schema.DropColumn:
		return "would drop column " + c.C.Name, true
	case *schema.ModifyColumn:
		if c.Change.Is(schema.ChangeType) && !Widens(c.From.Type.Type, c.To.Type.Type) {
			return fmt.Sprintf("would change column %s from %s to %s", c.From.Name, Name(d, c.From.Type.Type), Name(d, c.To.Type.Type)), true
		}
	}
	return "", false
}

// Widens reports a type change every stored value survives unchanged.
func Widens(from, to schema.Type) bool {
	rank := func(t schema.Type) int {
		it, ok := t.(*schema.IntegerType)
		if !ok {
			return 0
		}
		switch strings.ToLower(it.T) {
		case "smallint", "int2":
			return 1
		case "integer", "int", "int4":
			return 2
		case "bigint", "int8":
			return 3
		}
		return 0
	}
	if rf, rt := rank(from), rank(to); rf > 0 && rt > 0 {
		return rt >= rf
	}
	// timestamp(3) → timestamp: the same kind at no less precision keeps
	// every stored value (an unset precision is PostgreSQL's maximum, 6).
	if ft, ok := from.(*schema.TimeType); ok {
		tt, ok := to.(*schema.TimeType)
		return ok && TimeKind(ft.T) == TimeKind(tt.T) && TimePrecision(tt) >= TimePrecision(ft)
	}
	if BinaryCoercible(from, to) {
		return true
	}
	if st, ok := to.(*schema.StringType); ok && strings.EqualFold(st.T, "text") {
		_, fromString := from.(*schema.StringType)
		return fromString
	}
	return false
}

// Name spells a type as the dialect's SQL does (timestamp(3), timestamptz).
func Name(d dialect.Dialect, t schema.Type) string {
	format := sqlite.FormatType
	if d == dialect.Postgres {
		format = postgres.FormatType
	}
	if s, err := format(t); err == nil {
		return s
	}
	return fmt.Sprintf("%T", t)
}
