package typechange

import (
	"strings"

	"ariga.io/atlas/sql/schema"
)

// BinaryCoercible reports a type change PostgreSQL makes in the catalog
// alone, without rewriting or scanning the table: varchar growing or losing
// its length, varchar to text, numeric gaining precision at the same scale,
// a timestamp or time of the same kind at no less precision (the server's
// support function reduces the cast to nothing, so ALTER TYPE skips the
// rewrite). char(n) to text is not: that cast trims.
func BinaryCoercible(from, to schema.Type) bool {
	switch f := from.(type) {
	case *schema.StringType:
		t, ok := to.(*schema.StringType)
		if !ok || !isVarchar(f.T) {
			return false
		}
		if strings.EqualFold(t.T, "text") {
			return true
		}
		return isVarchar(t.T) && (t.Size == 0 || f.Size != 0 && t.Size >= f.Size)
	case *schema.DecimalType:
		t, ok := to.(*schema.DecimalType)
		return ok && strings.EqualFold(f.T, t.T) && f.Precision > 0 && (t.Precision == 0 && t.Scale == 0 || t.Scale == f.Scale && t.Precision >= f.Precision)
	case *schema.TimeType:
		t, ok := to.(*schema.TimeType)
		return ok && TimeKind(f.T) == TimeKind(t.T) && TimePrecision(t) >= TimePrecision(f)
	}
	return false
}

func isVarchar(t string) bool {
	switch strings.ToLower(t) {
	case "varchar", "character varying":
		return true
	}
	return false
}

// TimeKind is a time type's name with PostgreSQL's long spellings folded:
// timestamp, timestamptz, time, timetz, date.
func TimeKind(t string) string {
	switch t = strings.ToLower(t); t {
	case "timestamp without time zone":
		return "timestamp"
	case "timestamp with time zone":
		return "timestamptz"
	case "time without time zone":
		return "time"
	case "time with time zone":
		return "timetz"
	}
	return t
}

// TimePrecision is a time type's fractional-second precision; unset is
// PostgreSQL's maximum, 6.
func TimePrecision(t *schema.TimeType) int {
	if t.Precision == nil {
		return 6
	}
	return *t.Precision
}
