package core

import (
	"fmt"

	"ariga.io/atlas/sql/schema"

	"github.com/schemastate/schemastate/internal/ident"
)

// quotedDrops takes out of changes the drops of an index, foreign key or
// check whose name is not plain, and renders each with the module's own
// quoting (Driver.DropSQL); the rest is Atlas's to render.
func (pc *PlanContext) quotedDrops(changes []schema.Change) (own []string, rest []schema.Change, err error) {
	for _, c := range changes {
		m, ok := c.(*schema.ModifyTable)
		if !ok {
			rest = append(rest, c)
			continue
		}
		var keep []schema.Change
		for _, cc := range m.Changes {
			if name, drop := droppedName(cc); drop && name != "" && !ident.Plain(name) {
				stmt, err := pc.Driver.DropSQL(pc.Schema, m.T.Name, cc)
				if err != nil {
					return nil, nil, fmt.Errorf("drop %q from %s: %w", name, m.T.Name, err)
				}
				own = append(own, stmt)
				continue
			}
			keep = append(keep, cc)
		}
		if len(keep) > 0 {
			rest = append(rest, &schema.ModifyTable{T: m.T, Changes: keep})
		}
	}
	return own, rest, nil
}

// droppedName is the name of the object a drop of an index, foreign key or
// check removes.
func droppedName(c schema.Change) (string, bool) {
	switch c := c.(type) {
	case *schema.DropIndex:
		return c.I.Name, true
	case *schema.DropForeignKey:
		return c.F.Symbol, true
	case *schema.DropCheck:
		return c.C.Name, true
	}
	return "", false
}
