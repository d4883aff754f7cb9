package lint

import (
	"bytes"
	"fmt"
	"strings"

	"ariga.io/atlas/sql/schema"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/declare"
	"github.com/schemastate/schemastate/internal/endstate"
	"github.com/schemastate/schemastate/internal/ops"
	"github.com/schemastate/schemastate/internal/typechange"
)

// Level ranks a hazard for --fail-on.
type Level string

const (
	// LevelRefused: the change does not reach the database at boot — the
	// reconcile refuses it, fails on it, or never looks at it.
	LevelRefused Level = "refused"
	// LevelRewrite: the change is applied, but copies, rewrites or scans a
	// table while writers (or readers) wait.
	LevelRewrite Level = "rewrite"
	// LevelNotice: worth a reviewer's eye; nothing waits and nothing is lost.
	LevelNotice Level = "notice"
)

func (l Level) rank() int {
	switch l {
	case LevelRefused:
		return 3
	case LevelRewrite:
		return 2
	}
	return 1
}

func (l Level) atLeast(o Level) bool { return l.rank() >= o.rank() }

// ParseFailOn reads --fail-on: refused, rewrite or any.
func ParseFailOn(s string) (Level, error) {
	switch s {
	case "refused":
		return LevelRefused, nil
	case "rewrite":
		return LevelRewrite, nil
	case "any":
		return LevelNotice, nil
	}
	return "", fmt.Errorf("--fail-on %q: want refused, rewrite or any", s)
}

// Hazard codes. They are stable: CI jobs and reviewers match on them.
const (
	CodeDropTable        = "drop-table"           // refused: a table the base owns is no longer declared
	CodeDropColumn       = "drop-column"          // refused: a column dropped
	CodeTypeChange       = "type-change"          // refused: a type change that does not keep every value
	CodeNotNullNoDefault = "not-null-no-default"  // refused: a new NOT NULL column without a DEFAULT
	CodeEndState         = "end-state"            // refused when AC-33's end state is lost, notice when gained
	CodeHostTable        = "host-table"           // refused: a host table edited (never applied)
	CodeTableRewrite     = "table-rewrite"        // rewrite: PostgreSQL rewrites or scans the table under ACCESS EXCLUSIVE
	CodeSQLiteRebuild    = "sqlite-rebuild"       // rewrite: SQLite copies the table into a new one
	CodeIndexNotConc     = "index-not-concurrent" // rewrite: PostgreSQL builds an index without CONCURRENTLY
	CodeCertificate      = "certificate"          // notice: every installation leaves the certified steady state once
)

// Hazard is one thing a reviewer must know about the change.
type Hazard struct {
	Code  string `json:"code"`
	Level Level  `json:"level"`
	// Dialect and State say where it was found; State is empty for a
	// hazard found by comparing the declarations.
	Dialect dialect.Dialect `json:"dialect"`
	State   string          `json:"state,omitempty"`
	Table   string          `json:"table"`
	Column  string          `json:"column,omitempty"`
	Index   string          `json:"index,omitempty"`
	// Writer names the writer a writer-* hazard is of: this release's or
	// the base release's, and where its contract was read.
	Writer string `json:"writer,omitempty"`
	Detail string `json:"detail"`
	Advice string `json:"advice"`
	// Rows is the table's row count in the real store --db names, for a
	// hazard whose cost grows with it; absent without one.
	Rows *int64 `json:"rows,omitempty"`
	// copiesRows marks the hazards Rows is read for.
	copiesRows bool
}

// planHazards judges one state's plan: the diff of every table it changes,
// and the phases chosen for it.
func planHazards(d dialect.Dialect, state string, tables []ops.TableChanges, phases []ops.Phase) []Hazard {
	var out []Hazard
	add := func(h Hazard) {
		h.Dialect, h.State = d, state
		out = append(out, h)
	}
	for _, tc := range tables {
		if tc.Live == nil {
			continue // a new table: nothing to refuse, copy or lock
		}
		if len(tc.Refused) > 0 {
			// The table is left exactly as it is: only the refusals happen.
			for _, c := range tc.Changes {
				if why, refused := typechange.Destructive(d, c); refused {
					add(refusedHazard(tc.Table, c, why))
				}
			}
			continue
		}
		for _, c := range tc.Changes {
			switch c := c.(type) {
			case *schema.AddColumn:
				if !c.C.Type.Null && c.C.Default == nil {
					add(Hazard{Code: CodeNotNullNoDefault, Level: LevelRefused, Table: tc.Table, Column: c.C.Name,
						Detail: "a new NOT NULL column without a DEFAULT: the reconcile fails on every installation whose table holds a row, every boot",
						Advice: "declare a DEFAULT, or add the column nullable, fill it, and make it NOT NULL in a later release"})
				}
			case *schema.ModifyColumn:
				// A primary-key column is exempt: only SQLite's non-INTEGER key
				// declared without NOT NULL inspects as nullable (the host's
				// `id TEXT PRIMARY KEY`), every writer gives a key, and the
				// rebuild refuses a row whose key is NULL by naming it
				// (ops.ErrNullRow) — the shape the store already had,
				// not a change the declaration makes.
				if c.Change.Is(schema.ChangeNull) && !c.To.Type.Null && c.To.Default == nil && !inPrimaryKey(tc.Live, c.From.Name) {
					// With a default, the reconcile fills the NULLs first
					// (PostgreSQL) or the rebuild copies them into it (SQLite).
					add(Hazard{Code: CodeNotNullNoDefault, Level: LevelRefused, Table: tc.Table, Column: c.To.Name,
						Detail: "a column made NOT NULL without a DEFAULT: the reconcile fails on every installation where a row holds NULL in it, every boot",
						Advice: "declare a DEFAULT (the reconcile fills the NULLs with it), or fill them in the host first"})
				}
			}
			rulesFor(d).lockHazards(d, tc, c, phases, add)
		}
	}
	for _, ph := range phases {
		if ph.Name == ops.PhaseRebuild {
			add(Hazard{Code: CodeSQLiteRebuild, Level: LevelRewrite, Table: ph.Table, copiesRows: true,
				Detail: "SQLite copies the table into a new one (CREATE, INSERT … SELECT, DROP, RENAME) under the database write lock: every writer of the database waits for the copy",
				Advice: "expected for a key or column-definition change; count the rows (lint --db STORE) to size the boot's pause"})
		}
	}
	return out
}

func refusedHazard(table string, c schema.Change, why string) Hazard {
	h := Hazard{Level: LevelRefused, Table: table, Detail: why + " — refused at boot, the table is left as it is",
		Advice: "keep the old definition in schema.hcl; drop or narrow by hand, with a backup, if it must go"}
	switch c := c.(type) {
	case *schema.DropTable:
		h.Code = CodeDropTable
	case *schema.DropColumn:
		h.Code, h.Column = CodeDropColumn, c.C.Name
	case *schema.ModifyColumn:
		h.Code, h.Column = CodeTypeChange, c.To.Name
		h.Advice = "widen instead (integer → bigint, varchar → text), or keep the old type"
	default:
		h.Code = CodeTypeChange
	}
	return h
}

// widenedOnline reports a table whose widening the plan makes online — the
// shadow-table rebuild or the expand/copy/contract phases (no exclusive
// rewrite).
func widenedOnline(phases []ops.Phase, table string) bool {
	for _, ph := range phases {
		if ph.Table == table && (ph.Name == ops.PhaseWidenCopy || ph.Name == ops.PhaseRebuildCopy) {
			return true
		}
	}
	return false
}

func builtConcurrently(phases []ops.Phase, table, index string) bool {
	for _, ph := range phases {
		if ph.Table == table && ph.Name == ops.PhaseBuildIndex && ph.Object == index {
			return true
		}
	}
	return false
}

func indexColumns(idx *schema.Index) string {
	var cols []string
	for _, p := range idx.Parts {
		if p.C != nil {
			cols = append(cols, p.C.Name)
		}
	}
	return strings.Join(cols, ", ")
}

// declarationHazards compares the base and new declarations of one dialect.
func declarationHazards(d dialect.Dialect, base, next Source, bd, nd *declare.Declaration) []Hazard {
	var out []Hazard
	add := func(h Hazard) {
		h.Dialect = d
		out = append(out, h)
	}
	for _, t := range bd.Owned {
		nt := nd.Table(t.Name)
		if nt == nil {
			add(Hazard{Code: CodeDropTable, Level: LevelRefused, Table: t.Name,
				Detail: "the base declaration owns this table and the new one does not: a reconcile never drops it, it stays in every installation, no longer kept in shape",
				Advice: "keep declaring it; drop it by hand, with a backup, if it must go"})
			continue
		}
		for _, c := range t.Columns {
			if _, ok := nt.Column(c.Name); !ok {
				// Refused where the table exists (each state says so); a new
				// installation creates the table without it, and every writer
				// that still names the column (the live upsert, the backfill)
				// fails there.
				add(Hazard{Code: CodeDropColumn, Level: LevelRefused, Table: t.Name, Column: c.Name,
					Detail: "the new declaration no longer has this column: refused at boot where the table exists, and a new installation creates the table without it, where every writer that names it fails",
					Advice: "keep declaring it until no writer names it; drop it by hand, with a backup, if it must go"})
			}
		}
	}
	for _, name := range hostTableNames(bd, nd) {
		if why := hostTableChange(d, hostTable(bd, name), hostTable(nd, name)); why != "" {
			add(Hazard{Code: CodeHostTable, Level: LevelRefused, Table: name,
				Detail: "host table " + why + ": host tables are never inspected or changed, so this edit is never applied",
				Advice: "change the host's own migration; here, declare only what the foreign keys need"})
		}
	}
	if b, n := bd.EndState().KeyBearing(), nd.EndState().KeyBearing(); b != n {
		add(endStateHazard(d, n, nd.EndState()))
	}
	if !bytes.Equal(base.text(), next.text()) {
		add(Hazard{Code: CodeCertificate, Level: LevelNotice, Table: "*",
			Detail: "schema.hcl changed: the certificate vouches for the declaration's exact text, so every installation's next boot leaves the fast path once — it takes the lock, inspects, plans and re-certifies",
			Advice: "expected for any release that edits schema.hcl; batch edits rather than ship them one by one"})
	}
	return out
}

func endStateHazard(d dialect.Dialect, reached bool, es endstate.Facts) Hazard {
	if reached {
		return Hazard{Code: CodeEndState, Level: LevelNotice, Dialect: d, Table: "task_session_subagents",
			Detail: "the new declaration reaches AC-33's end state (clauses 1–3) and the base did not: the reconcile writes subagent_context_execution_since, and the backfill runs",
			Advice: "expected when the amendment ships"}
	}
	return Hazard{Code: CodeEndState, Level: LevelRefused, Dialect: d, Table: "task_session_subagents",
		Detail: "the new declaration does not reach AC-33's end state (" + strings.Join(es.Missing(), "; ") + "): no installation that lacks subagent_context_execution_since would ever write it, nor run the backfill",
		Advice: "keep agent_execution_id NOT NULL and the three-column unique key, and declare no two-column unique"}
}

func hostTableNames(a, b *declare.Declaration) []string {
	var out []string
	seen := map[string]bool{}
	for _, d := range []*declare.Declaration{a, b} {
		for _, t := range d.Host {
			if !seen[t.Name] {
				seen[t.Name] = true
				out = append(out, t.Name)
			}
		}
	}
	return out
}

func hostTable(d *declare.Declaration, name string) *schema.Table {
	for _, t := range d.Host {
		if t.Name == name {
			return t
		}
	}
	return nil
}

// hostTableChange says how a host table's declaration changed, or "".
func hostTableChange(d dialect.Dialect, from, to *schema.Table) string {
	switch {
	case from == nil:
		return to.Name + " newly declared"
	case to == nil:
		return from.Name + " no longer declared"
	}
	changes, err := rulesFor(d).differ.TableDiff(from, to)
	if err != nil {
		return "changed (" + err.Error() + ")"
	}
	if len(changes) == 0 {
		return ""
	}
	var what []string
	for _, c := range changes {
		what = append(what, changeText(c))
	}
	return to.Name + " changed: " + strings.Join(what, ", ")
}

func changeText(c schema.Change) string {
	switch c := c.(type) {
	case *schema.AddColumn:
		return "adds column " + c.C.Name
	case *schema.DropColumn:
		return "drops column " + c.C.Name
	case *schema.ModifyColumn:
		return "modifies column " + c.To.Name
	case *schema.AddIndex:
		return "adds index " + c.I.Name
	case *schema.DropIndex:
		return "drops index " + c.I.Name
	}
	return strings.TrimPrefix(fmt.Sprintf("%T", c), "*schema.")
}

// inPrimaryKey reports whether column is part of t's primary key.
func inPrimaryKey(t *schema.Table, column string) bool {
	if t == nil || t.PrimaryKey == nil {
		return false
	}
	for _, p := range t.PrimaryKey.Parts {
		if p.C != nil && p.C.Name == column {
			return true
		}
	}
	return false
}
