// Package catalog opens Atlas's inspectors safely and reads one table with
// them: the one way the reconcile, and the writer's start check, read a
// live table's shape.
package catalog

import (
	"ariga.io/atlas/sql/schema"

	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/ops"
)

// Atlas's SQLite inspector formats a catalog name into a string literal
// (pragma_index_xinfo('<index>')) without doubling a quote inside it, and
// modernc's driver runs every statement of a text it is given: an index
// named `x'); DROP TABLE t; --` would run its DROP while the owned tables
// are only being read. oneStatement is the querier Atlas's SQLite driver is
// opened over. Atlas's four catalog reads that take a name (atlasPragmas)
// reach the database with the name bound as a parameter instead, so any
// name an operator may create is read as it is; any other text that SQLite
// would split into more than one statement is refused, naming the text.

// SQLiteQuerier returns q passing only texts that are one SQLite statement,
// with the names Atlas formats into its catalog reads bound instead.
func SQLiteQuerier(q dialect.Querier) schema.ExecQuerier { return oneStatement{q} }

// oneStatement passes to q only texts that are one SQLite statement.
type oneStatement struct{ q dialect.Querier }

func (o oneStatement) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if err := SingleSQLiteStatement(query); err != nil {
		return nil, err
	}
	return o.q.ExecContext(ctx, query, args...)
}

func (o oneStatement) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if len(args) == 0 {
		if bound, name, ok := boundPragma(query); ok {
			return o.q.QueryContext(ctx, bound, name)
		}
	}
	if err := SingleSQLiteStatement(query); err != nil {
		return nil, err
	}
	return o.q.QueryContext(ctx, query, args...)
}

// atlasPragmas are the catalog reads Atlas's SQLite inspector formats a
// table's or an index's name into (ariga.io/atlas/sql/sqlite/inspect.go:
// columnsQuery, indexesQuery, indexColumnsQuery, fksQuery).
var atlasPragmas = []string{
	"SELECT `name`, `type`, (not `notnull`) AS `nullable`, `dflt_value`, (`pk` <> 0) AS `pk`, `hidden` FROM pragma_table_xinfo('%s') ORDER BY `cid`",
	"SELECT `il`.`name`, `il`.`unique`, `il`.`origin`, `il`.`partial`, `m`.`sql` FROM pragma_index_list('%s') AS il JOIN sqlite_master AS m ON il.name = m.name",
	"SELECT name, desc FROM pragma_index_xinfo('%s') WHERE key = 1 ORDER BY seqno",
	"SELECT `id`, `from`, `to`, `table`, `on_update`, `on_delete` FROM pragma_foreign_key_list('%s') ORDER BY id, seq",
}

// boundPragma recognises query as one of atlasPragmas with a name formatted
// in, and returns it with the name as a bound parameter.
func boundPragma(query string) (bound, name string, ok bool) {
	for _, tmpl := range atlasPragmas {
		prefix, suffix, _ := strings.Cut(tmpl, "'%s'")
		if len(query) >= len(prefix)+len(suffix)+2 && strings.HasPrefix(query, prefix+"'") && strings.HasSuffix(query, "'"+suffix) {
			return prefix + "?" + suffix, query[len(prefix)+1 : len(query)-len(suffix)-1], true
		}
	}
	return "", "", false
}

// SingleSQLiteStatement refuses a text that is not exactly one complete
// statement as SQLite's tokenizer reads it.
func SingleSQLiteStatement(s string) error {
	n, complete := SQLiteStatements(s)
	if n == 1 && complete {
		return nil
	}
	return fmt.Errorf("%w (a name or expression read off the catalog holds a quote or a comment): %s", ops.ErrNotOneStatement, s)
}

// SQLiteStatements counts the statements of s as SQLite's tokenizer splits
// them: at a ';' outside a string literal ('…', ” for a quote), a quoted
// identifier ("…", `…` with the quote doubled, […]) and a comment (-- to the
// end of the line, /* … */). A statement of nothing but spaces and comments
// is not counted. complete is false when s ends inside a literal, a quoted
// identifier or a block comment.
func SQLiteStatements(s string) (n int, complete bool) {
	content := false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == ';':
			if content {
				n++
			}
			content = false
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f':
		case c == '-' && i+1 < len(s) && s[i+1] == '-':
			end := strings.IndexByte(s[i:], '\n')
			if end < 0 {
				i = len(s)
				break
			}
			i += end
		case c == '/' && i+1 < len(s) && s[i+1] == '*':
			end := strings.Index(s[i+2:], "*/")
			if end < 0 {
				return n + boolInt(content), false
			}
			i += 2 + end + 1
		case c == '\'' || c == '"' || c == '`' || c == '[':
			closing := c
			if c == '[' {
				closing = ']'
			}
			content = true
			j := i + 1
			for {
				k := strings.IndexByte(s[j:], closing)
				if k < 0 {
					return n + 1, false
				}
				j += k + 1
				// A doubled quote is a quote inside; ']' has no escape.
				if closing != ']' && j < len(s) && s[j] == closing {
					j++
					continue
				}
				break
			}
			i = j - 1
		default:
			content = true
		}
	}
	return n + boolInt(content), true
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
