package reconcile

import (
	"errors"
	"strings"
	"testing"

	"ariga.io/atlas/sql/schema"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/catalog"
	"github.com/schemastate/schemastate/internal/ident"
	"github.com/schemastate/schemastate/internal/ops"
	"github.com/schemastate/schemastate/reconcile/internal/core"
)

// quotedIdents returns, unquoted, every quoted identifier ("…" or `…`, the
// quote doubled inside) of a statement, skipping string literals; ok is
// false when a quote is left open.
func quotedIdents(stmt string) (idents []string, ok bool) {
	for i := 0; i < len(stmt); i++ {
		q := stmt[i]
		if q != '"' && q != '`' && q != '\'' {
			continue
		}
		var b strings.Builder
		j := i + 1
		for ; ; j++ {
			if j >= len(stmt) {
				return nil, false
			}
			if stmt[j] == q {
				if j+1 < len(stmt) && stmt[j+1] == q {
					b.WriteByte(q)
					j++
					continue
				}
				break
			}
			b.WriteByte(stmt[j])
		}
		if q != '\'' {
			idents = append(idents, b.String())
		}
		i = j
	}
	return idents, true
}

// FuzzIdentifier: for any index name, on both dialects, dropping and
// creating the index is either refused by name (ErrUnsafeName) before any
// SQL is rendered, or rendered as exactly one statement whose last quoted
// identifier reads back as the name — a quote inside it doubled, none left
// open. Plain names take Atlas's rendering, others the module's quoting.
func FuzzIdentifier(f *testing.F) {
	for _, s := range []string{
		"idx_subagents_model", "", "a", "1a", `a"b`, "a`b", "a'b", `"`, "`", "''",
		`idx_messages_created_at";DROP TABLE kandev_meta;--`,
		"idx_messages_created_at`;DROP TABLE kandev_meta;--",
		`idx_messages_created_at'); DROP TABLE kandev_meta; --`,
		"x]; DROP TABLE t; --", "x\x00y", "ünïcode", "a\"\"b",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		quoted := "DROP INDEX " + dialect.QuoteIdent(name)
		if idents, ok := quotedIdents(quoted); !ok || len(idents) != 1 || idents[0] != name {
			t.Fatalf("QuoteIdent(%q) does not read back: %s", name, quoted)
		}
		if n, complete := catalog.SQLiteStatements(quoted); n != 1 || !complete {
			t.Fatalf("QuoteIdent(%q) is not one statement: %s", name, quoted)
		}
		for _, d := range []dialect.Dialect{dialect.SQLite, dialect.Postgres} {
			schemaName := "main"
			if d == dialect.Postgres {
				schemaName = "public"
			}
			s := schema.New(schemaName)
			tbl := schema.NewTable("t").AddColumns(schema.NewStringColumn("a", "text"))
			s.AddTables(tbl)
			idx := schema.NewIndex(name).AddColumns(tbl.Columns[0])
			pc := &core.PlanContext{Atlas: atlasFor(d), Schema: schemaName, Driver: driverOf(d)}

			for _, c := range []schema.Change{&schema.DropIndex{I: idx}, &schema.AddIndex{I: idx}} {
				stmts, err := pc.Render(&schema.ModifyTable{T: tbl, Changes: []schema.Change{c}})
				if err != nil {
					if !errors.Is(err, ops.ErrUnsafeName) {
						t.Fatalf("%s %T %q: refused without ErrUnsafeName: %v", d, c, name, err)
					}
					if ident.Plain(name) {
						t.Fatalf("%s %T %q: a plain name refused: %v", d, c, name, err)
					}
					continue
				}
				if len(stmts) != 1 {
					t.Fatalf("%s %T %q: %d statements: %q", d, c, name, len(stmts), stmts)
				}
				if n, complete := catalog.SQLiteStatements(stmts[0]); n != 1 || !complete {
					t.Fatalf("%s %T %q: not one statement: %s", d, c, name, stmts[0])
				}
				idents, ok := quotedIdents(stmts[0])
				if !ok || len(idents) == 0 {
					t.Fatalf("%s %T %q: a quote left open: %s", d, c, name, stmts[0])
				}
				if _, drop := c.(*schema.DropIndex); drop && idents[len(idents)-1] != name {
					t.Fatalf("%s: %s names %q, not %q", d, stmts[0], idents[len(idents)-1], name)
				}
				if _, add := c.(*schema.AddIndex); add && (!ident.Plain(name) || !contains(idents, name)) {
					t.Fatalf("%s: %s rendered for %q", d, stmts[0], name)
				}
			}
		}
	})
}
