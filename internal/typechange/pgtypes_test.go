package typechange

import (
	"testing"

	"ariga.io/atlas/sql/schema"
	"github.com/stretchr/testify/require"
)

func TestBinaryCoercible(t *testing.T) {
	p := func(n int) *int { return &n }
	for _, c := range []struct {
		name     string
		from, to schema.Type
		want     bool
	}{
		{"varchar grows", &schema.StringType{T: "varchar", Size: 10}, &schema.StringType{T: "varchar", Size: 20}, true},
		{"varchar shrinks", &schema.StringType{T: "varchar", Size: 20}, &schema.StringType{T: "varchar", Size: 10}, false},
		{"varchar loses its length", &schema.StringType{T: "character varying", Size: 20}, &schema.StringType{T: "varchar"}, true},
		{"varchar to text", &schema.StringType{T: "varchar", Size: 20}, &schema.StringType{T: "text"}, true},
		{"char to text trims", &schema.StringType{T: "character", Size: 5}, &schema.StringType{T: "text"}, false},
		{"numeric gains precision", &schema.DecimalType{T: "numeric", Precision: 10, Scale: 2}, &schema.DecimalType{T: "numeric", Precision: 12, Scale: 2}, true},
		{"numeric changes scale", &schema.DecimalType{T: "numeric", Precision: 10, Scale: 2}, &schema.DecimalType{T: "numeric", Precision: 12, Scale: 3}, false},
		{"timestamp gains precision", &schema.TimeType{T: "timestamp", Precision: p(3)}, &schema.TimeType{T: "timestamp without time zone"}, true},
		{"timestamp loses precision", &schema.TimeType{T: "timestamp"}, &schema.TimeType{T: "timestamp", Precision: p(3)}, false},
		{"timestamp to timestamptz", &schema.TimeType{T: "timestamp"}, &schema.TimeType{T: "timestamptz"}, false},
		{"integer to bigint rewrites", &schema.IntegerType{T: "integer"}, &schema.IntegerType{T: "bigint"}, false},
	} {
		require.Equal(t, c.want, BinaryCoercible(c.from, c.to), c.name)
	}
}
