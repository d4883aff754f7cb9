package lint

import (
	"context"
	"strings"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/contract"
	"github.com/schemastate/schemastate/internal/declare"
)

// Writers are the writer contracts a lint judges the new declaration
// against: this release's (the one built in, or --writers) and the base
// release's (--base-git REF reads REF:writers.json; --base-writers a file),
// which keeps writing during a rolling deploy.
type Writers struct {
	// This is this release's contract; nil means the built-in one.
	This *contract.Contract
	// Base is the base release's; nil when there is none (the report says
	// so).
	Base *contract.Contract
}

// writerAdvice is, per finding code, how to ship the edit instead: in two
// releases, the writer first, so that no writer of either release running
// during the deploy meets a shape it cannot write.
var writerAdvice = map[string]string{
	contract.CodeNotNull:        "ship it in two releases, writer first: release 1 makes every writer write a value for every frame (writers.json says so, no \"null\"), release 2 declares NOT NULL once no writer of the release before 1 runs; a new column: declare it with a DEFAULT, or nullable first",
	contract.CodeConflictTarget: "ship it in two releases: release 1 declares the new unique key beside the old one and moves the writer's ON CONFLICT to it; release 2 drops the old key once no writer of the release before 1 runs",
	contract.CodeCheck:          "ship it in two releases, writer first: release 1 stops every writer writing the values the check rejects (writers.json bounds them: min, values), release 2 declares the check",
	contract.CodeForeignKey:     "declare the foreign key only once every writer waits for the referenced row (writers.json \"after\") — a writer release first — or leave the column unconstrained",
	contract.CodeUnique:         "ON CONFLICT catches one key only: make the new key the writer's conflict target in a writer release first, or include the whole conflict target in it",
	contract.CodeColumn:         "add a column one release before any writer names it, and stop the writers naming a column one release before the declaration drops it",
	contract.CodeTable:          "keep declaring the table while any writer of this or the base release writes it",
}

// writerHazards judges the new declaration of one dialect against each
// writer of this release and of the base: a refused hazard where the
// contract says a writer's rows fail, a notice where it cannot decide.
func writerHazards(d dialect.Dialect, nd *declare.Declaration, ws Writers) ([]Hazard, error) {
	this := ws.This
	if this == nil {
		var err error
		if this, err = contract.Builtin(); err != nil {
			return nil, err
		}
	}
	var out []Hazard
	for _, c := range []struct {
		k    *contract.Contract
		who  string
		base bool
	}{{this, "this release's writer", false}, {ws.Base, "the base release's writer", true}} {
		if c.k == nil {
			continue
		}
		for i := range c.k.Writers {
			w := &c.k.Writers[i]
			for _, f := range contract.Judge(w, contract.Table{T: nd.Table(w.Table)}) {
				out = append(out, writerHazard(d, f, c.who+" ("+w.Name+", "+c.k.Source+")"))
			}
		}
	}
	return out, nil
}

func writerHazard(d dialect.Dialect, f contract.Finding, writer string) Hazard {
	level, detail := LevelRefused, writer+": "+f.Detail+"; fails "+f.Frames
	if !f.Refused {
		level, detail = LevelNotice, writer+": "+f.Detail+" (the contract cannot decide it); may fail "+f.Frames
	}
	return Hazard{Code: f.Code, Level: level, Dialect: d, Table: f.Table, Column: f.Column, Index: f.Constraint,
		Writer: writer, Detail: detail, Advice: writerAdvice[f.Code]}
}

// GitWriters reads writers.json as it is at ref (git show, run in dir); nil
// and no error when ref has none — a release from before the contract.
func GitWriters(ctx context.Context, dir, ref string) (*contract.Contract, error) {
	spec := ref + ":" + contract.File
	out, msg, err := gitShow(ctx, dir, spec)
	if err != nil {
		if strings.Contains(msg, "does not exist in") || strings.Contains(msg, "exists on disk, but not in") {
			return nil, nil
		}
		return nil, err
	}
	return contract.Parse(out, spec)
}
