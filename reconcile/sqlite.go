package reconcile

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"ariga.io/atlas/sql/migrate"
	"ariga.io/atlas/sql/schema"
	"ariga.io/atlas/sql/sqlite"

	"github.com/schemastate/schemastate/dialect"
)

// SQLite: the lock is SQLite's own write lock. The certificate is checked
// first, with no transaction and no lock: its two reads (the keys with the
// certificate, then the catalog) each take SQLite's shared lock for one
// statement, which a host writer's RESERVED lock (BEGIN IMMEDIATE) does not
// block, so a steady-state boot reads, finds nothing to do, and never waits
// behind a host writer. The two reads need no common snapshot: the keys are
// write-once and the certificate names the catalog it vouches for, so a
// catalog changed between them only fails the match and sends the boot to
// the full check. A certified boot runs nothing but those two statements:
// the connection's pragmas matter only to a reconcile that writes, so it
// neither reads nor sets them and hands the connection back exactly as it
// was lent. Only when there is work does lock switch the connection to the
// reconcile's settings and take the write lock, and the reconcile then runs
// on that one pinned connection inside one BEGIN IMMEDIATE transaction, each
// step inside a SAVEPOINT, so a failed step rolls back to exactly the state
// before it and a crash at any instant commits nothing. Foreign keys are
// switched off on that connection BEFORE the transaction (the pragma is a
// no-op inside one) and verified off: with them on, the rebuild's DROP TABLE
// would fire ON DELETE CASCADE in every referencing table and silently
// delete their rows.
//
// The certificate's reads run under the host's own busy timeout. Should one
// meet a writer's commit lock (rollback journal) and fail, the boot takes
// the lock and runs the full check, which is always correct.

type sqliteSession struct {
	conn *sql.Conn
	// lockWait is the busy timeout the write lock waits under.
	lockWait time.Duration
	// set records that lock changed the connection's pragmas; fkWasOn and
	// busyWas are the host's values, restored before the connection goes
	// back to its pool.
	set     bool
	fkWasOn bool
	busyWas int
	step    string
	// inTx: lock began the write transaction, which close commits.
	inTx bool
}

func openSQLite(ctx context.Context, db *sql.DB, o *options) (*sqliteSession, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	return &sqliteSession{conn: conn, lockWait: o.lockWait}, nil
}

// lock switches foreign keys off (verified) and the busy timeout to the
// lock wait, and takes the write lock, waiting up to the lock wait.
func (s *sqliteSession) lock(ctx context.Context) error {
	if err := s.setPragmas(ctx); err != nil {
		return err
	}
	start := time.Now()
	if _, err := s.conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return fmt.Errorf("take the write lock (waited %s): %w", time.Since(start).Round(time.Millisecond), err)
	}
	s.inTx = true
	return nil
}

// setPragmas records the host's foreign_keys and busy_timeout, then sets the
// reconcile's, outside any transaction.
func (s *sqliteSession) setPragmas(ctx context.Context) error {
	var fk int
	if err := s.conn.QueryRowContext(ctx, "PRAGMA foreign_keys").Scan(&fk); err != nil {
		return fmt.Errorf("read foreign_keys on the reconcile connection: %w", err)
	}
	var busy int
	if err := s.conn.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&busy); err != nil {
		return fmt.Errorf("read busy_timeout on the reconcile connection: %w", err)
	}
	s.set, s.fkWasOn, s.busyWas = true, fk == 1, busy
	for _, stmt := range []string{
		"PRAGMA foreign_keys = OFF",
		fmt.Sprintf("PRAGMA busy_timeout = %d", s.lockWait.Milliseconds()),
	} {
		if _, err := s.conn.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("%s: %w", stmt, err)
		}
	}
	if err := s.conn.QueryRowContext(ctx, "PRAGMA foreign_keys").Scan(&fk); err != nil {
		return fmt.Errorf("could not read foreign_keys on the reconcile connection: %w", err)
	} else if fk != 0 {
		return fmt.Errorf("could not switch foreign keys off on the reconcile connection (foreign_keys=%d)", fk)
	}
	return nil
}

func (s *sqliteSession) querier() dialect.Querier { return s.conn }

func (s *sqliteSession) schemaName() string { return "main" }

func (s *sqliteSession) begin(ctx context.Context, step string) (dialect.Querier, error) {
	s.step = savepointName(step)
	if _, err := s.conn.ExecContext(ctx, "SAVEPOINT "+s.step); err != nil {
		return nil, err
	}
	return s.conn, nil
}

func (s *sqliteSession) end(ctx context.Context, ok bool) error {
	if !ok {
		if _, err := s.conn.ExecContext(ctx, "ROLLBACK TO "+s.step); err != nil {
			return err
		}
	}
	_, err := s.conn.ExecContext(ctx, "RELEASE "+s.step)
	return err
}

func (s *sqliteSession) close(ctx context.Context) error {
	var err error
	if s.inTx {
		if _, err = s.conn.ExecContext(ctx, "COMMIT"); err != nil {
			_, _ = s.conn.ExecContext(context.Background(), "ROLLBACK")
		}
	}
	s.release(ctx)
	return err
}

func (s *sqliteSession) abort() {
	if s.inTx {
		_, _ = s.conn.ExecContext(context.Background(), "ROLLBACK")
	}
	s.release(context.Background())
}

// release restores the host's pragmas, where lock changed them, and hands
// the connection back to its pool.
func (s *sqliteSession) release(ctx context.Context) {
	if s.set {
		if s.fkWasOn {
			_, _ = s.conn.ExecContext(context.Background(), "PRAGMA foreign_keys = ON")
		}
		_, _ = s.conn.ExecContext(context.Background(), fmt.Sprintf("PRAGMA busy_timeout = %d", s.busyWas))
	}
	s.conn.Close()
}

func savepointName(step string) string { return "schemastate_" + strings.ReplaceAll(step, "-", "_") }

// normalizeLive removes differences that are spellings of the same shape, so
// an equivalent live table plans no change (and runs no DDL).
func normalizeLive(d dialect.Dialect, live, want *schema.Table) {
	if d != dialect.SQLite {
		return
	}
	// An inline UNIQUE (…) constraint inspects as sqlite_autoindex_T_N; it is
	// the same uniqueness as a declared unique index over the same columns.
	for _, idx := range live.Indexes {
		if !idx.Unique || !strings.HasPrefix(idx.Name, "sqlite_autoindex_") {
			continue
		}
		for _, w := range want.Indexes {
			if w.Unique && sameColumns(idx, w) {
				idx.Name = w.Name
				idx.Attrs = nil
			}
		}
	}
}

func sameColumns(a, b *schema.Index) bool {
	if len(a.Parts) != len(b.Parts) {
		return false
	}
	for i := range a.Parts {
		if a.Parts[i].C == nil || b.Parts[i].C == nil || a.Parts[i].C.Name != b.Parts[i].C.Name {
			return false
		}
	}
	return true
}

// needsCopy reports whether SQLite can only make these changes by rebuilding
// the table. ALTER TABLE handles adding a nullable-or-defaulted column and
// adding or dropping a named index; everything else — a changed or dropped
// autoindex (an inline constraint cannot be dropped), a changed column, a key
// or foreign-key change — takes the copy path.
func needsCopy(changes []schema.Change) bool {
	for _, c := range changes {
		switch c := c.(type) {
		case *schema.AddColumn:
			if !c.C.Type.Null && c.C.Default == nil {
				return true
			}
		case *schema.AddIndex:
		case *schema.DropIndex:
			if strings.HasPrefix(c.I.Name, "sqlite_autoindex_") {
				return true
			}
		default:
			return true
		}
	}
	return false
}

// rendersCopy reports whether Atlas rendered a plan as its own copy path
// (PRAGMA foreign_keys, DROP TABLE, rename) rather than as ALTER statements.
func rendersCopy(stmts []string) bool {
	for _, s := range stmts {
		u := strings.ToUpper(strings.TrimSpace(s))
		if strings.HasPrefix(u, "DROP TABLE") || strings.HasPrefix(u, "PRAGMA FOREIGN_KEYS") {
			return true
		}
	}
	return false
}

// rebuild is SQLite's documented table rebuild ("Making Other Kinds Of Table
// Schema Changes"): create the new table, copy every row with an explicit
// column list, drop the old table, rename the new one into place, recreate
// the declared indexes and any triggers the old table carried. The old
// table's drift — undeclared indexes, foreign keys and checks — is created
// again on the new one (drift.go).
type rebuild struct {
	table    string
	tmp      string
	create   []string
	copy     string
	indexes  []string
	triggers []string
	// refs are the tables whose foreign keys reference the rebuilt table.
	refs []string
	// fkCheck says why the rebuild compares foreign_key_check before and
	// after the copy; empty when the violation set cannot change (fkCheckWhy).
	fkCheck string
	// nulls are the columns the rebuild makes NOT NULL with no DEFAULT to
	// fill a NULL with (fills), each with the query that finds a row holding
	// NULL there: such a row cannot be copied, so apply refuses, naming it,
	// before it changes anything. The host's own `id TEXT PRIMARY KEY` is one:
	// SQLite lets a non-INTEGER primary key hold NULL.
	nulls []nullCheck
}

// nullCheck finds one row holding NULL in a column the rebuild tightens.
type nullCheck struct {
	column string
	// names are the columns query returns to name the row by: rowid (unless
	// the table has none), then the declared key's columns.
	names []string
	query string
}

// ErrNullRow is wrapped by a rebuild refused because a row holds NULL in a
// column the declaration makes NOT NULL with no DEFAULT: the copy could not
// keep the row. The error names the row; give it a value (or delete it) and
// the next boot rebuilds.
var ErrNullRow = errors.New("a row holds NULL where the declaration says NOT NULL")

func (r *rebuild) statements() []string {
	out := append([]string{}, r.create...)
	out = append(out, r.copy,
		"DROP TABLE "+dialect.QuoteIdent(r.table),
		"ALTER TABLE "+dialect.QuoteIdent(r.tmp)+" RENAME TO "+dialect.QuoteIdent(r.table))
	out = append(out, r.indexes...)
	return append(out, r.triggers...)
}

func planRebuild(ctx context.Context, drv migrate.Driver, q dialect.Querier, live, want *schema.Table, changes, drift []schema.Change) (*rebuild, error) {
	r := &rebuild{table: want.Name, tmp: "schemastate_new_" + want.Name}
	tmp := *want
	tmp.Name = r.tmp
	tmp.Indexes = nil
	tmp.ForeignKeys = append([]*schema.ForeignKey(nil), want.ForeignKeys...)
	tmp.Attrs = append([]schema.Attr(nil), want.Attrs...)
	var keepIndexes []*schema.Index
	for _, c := range drift {
		switch c := c.(type) {
		case *schema.DropForeignKey:
			fk := *c.F
			fk.Table = &tmp
			if fk.RefTable == live {
				fk.RefTable = &tmp
			}
			if _, err := strconv.Atoi(fk.Symbol); err == nil {
				fk.Symbol = "" // SQLite's numbering of an unnamed key, not a name
			}
			tmp.ForeignKeys = append(tmp.ForeignKeys, &fk)
		case *schema.DropCheck:
			tmp.Attrs = append(tmp.Attrs, c.C)
		case *schema.DropIndex:
			keepIndexes = append(keepIndexes, c.I)
		}
	}
	var err error
	if r.create, err = render(ctx, drv, []schema.Change{&schema.AddTable{T: &tmp}}); err != nil {
		return nil, err
	}
	// Explicit column copy: every declared column that exists live keeps its
	// stored value byte for byte; a new column takes its declared DEFAULT
	// ('unknown' for agent_execution_id, AC-33 clause 5).
	// A column tightened to NOT NULL takes its DEFAULT where it held NULL (fills).
	var cols, exprs []string
	fill := fills(live, want)
	for _, c := range want.Columns {
		if _, ok := live.Column(c.Name); ok {
			q := dialect.QuoteIdent(c.Name)
			cols = append(cols, q)
			if v, ok := fill[c.Name]; ok {
				q = fmt.Sprintf("COALESCE(%s, %s)", q, v)
			}
			exprs = append(exprs, q)
		}
	}
	r.copy = fmt.Sprintf("INSERT INTO %s (%s) SELECT %s FROM %s", dialect.QuoteIdent(r.tmp), strings.Join(cols, ", "), strings.Join(exprs, ", "), dialect.QuoteIdent(want.Name))
	r.nulls = nullChecks(live, want, fill)
	for _, idx := range want.Indexes {
		s, err := render(ctx, drv, []schema.Change{&schema.ModifyTable{T: want, Changes: []schema.Change{&schema.AddIndex{I: idx}}}})
		if err != nil {
			return nil, err
		}
		r.indexes = append(r.indexes, s...)
	}
	for _, idx := range keepIndexes {
		stmts, err := keptIndex(ctx, drv, q, want, idx)
		if err != nil {
			return nil, err
		}
		r.indexes = append(r.indexes, stmts...)
	}
	if r.triggers, err = queryStrings(ctx, q, `SELECT sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name = ? AND sql IS NOT NULL ORDER BY name`, want.Name); err != nil {
		return nil, err
	}
	if r.refs, err = queryStrings(ctx, q, `SELECT DISTINCT m.name FROM sqlite_master m, pragma_foreign_key_list(m.name) f WHERE m.type = 'table' AND f."table" = ? ORDER BY m.name`, want.Name); err != nil {
		return nil, err
	}
	r.fkCheck = fkCheckWhy(live, &tmp, changes, r.refs)
	return r, nil
}

// nullChecks are the rebuild's checks for a NULL it could not copy: one per
// column nullable live that the declaration makes NOT NULL and fills do not
// fill.
func nullChecks(live, want *schema.Table, fill map[string]string) []nullCheck {
	var out []nullCheck
	for _, wc := range want.Columns {
		lc, ok := live.Column(wc.Name)
		if _, filled := fill[wc.Name]; !ok || filled || !lc.Type.Null || wc.Type.Null {
			continue
		}
		var names []string
		if !slices.ContainsFunc(live.Attrs, func(a schema.Attr) bool { _, ok := a.(*sqlite.WithoutRowID); return ok }) {
			names = append(names, "rowid")
		}
		var key []*schema.Column
		if want.PrimaryKey != nil {
			for _, p := range want.PrimaryKey.Parts {
				key = append(key, p.C)
			}
		}
		for _, idx := range want.Indexes {
			if idx.Unique {
				for _, p := range idx.Parts {
					key = append(key, p.C)
				}
				break
			}
		}
		for _, c := range key {
			if _, ok := live.Column(c.Name); ok && c.Name != wc.Name && !slices.Contains(names, c.Name) {
				names = append(names, c.Name)
			}
		}
		sel := make([]string, len(names))
		for i, n := range names {
			sel[i] = dialect.QuoteIdent(n)
		}
		out = append(out, nullCheck{column: wc.Name, names: names, query: fmt.Sprintf("SELECT %s FROM %s WHERE %s IS NULL LIMIT 1",
			strings.Join(sel, ", "), dialect.QuoteIdent(want.Name), dialect.QuoteIdent(wc.Name))})
	}
	return out
}

// refuseNulls fails with ErrNullRow, naming the row, when a column the
// rebuild tightens holds a NULL it could not copy.
func (r *rebuild) refuseNulls(ctx context.Context, q dialect.Querier) error {
	for _, c := range r.nulls {
		vals := make([]sql.NullString, len(c.names))
		dest := make([]any, len(vals))
		for i := range vals {
			dest[i] = &vals[i]
		}
		err := q.QueryRowContext(ctx, c.query).Scan(dest...)
		if errors.Is(err, sql.ErrNoRows) {
			continue
		}
		if err != nil {
			return fmt.Errorf("look for a NULL %s: %w", c.column, err)
		}
		row := make([]string, len(c.names))
		for i, n := range c.names {
			v := "NULL"
			if vals[i].Valid {
				v = strconv.Quote(vals[i].String)
			}
			row[i] = n + " " + v
		}
		return fmt.Errorf("%w: %s row (%s) holds NULL in %s, which has no DEFAULT to fill it; the table is left as it was — give the row a value in %s or delete it, and the next boot rebuilds",
			ErrNullRow, r.table, strings.Join(row, ", "), c.column, c.column)
	}
	return nil
}

// fkCheckWhy says why a rebuild must compare foreign_key_check before and
// after its copy, or returns "" when the violation set cannot change.
//
// The copy moves every row verbatim, with its id, into a table whose foreign
// keys are those the live table has (declared and kept drift). A violation is
// a row's foreign-key columns against the parent's key, so with the same keys
// over the same columns (none of them retyped, recollated or filled) and
// parents the rebuild does not touch, the same rows violate the same keys
// before and after: the two scans of the table could only count the same
// rows. The checks therefore run whenever the table's foreign keys differ
// from the live ones (added, dropped, another column, parent or action), a
// change touches a column of one of them, or any table references the rebuilt
// one — itself included: its parent key is dropped and created again, so
// those tables' keys are checked against it afresh. In doubt, they run.
func fkCheckWhy(live, rebuilt *schema.Table, changes []schema.Change, refs []string) string {
	if len(refs) > 0 {
		return "referenced by " + strings.Join(refs, ", ")
	}
	if !slices.Equal(foreignKeyKeys(live, live), foreignKeyKeys(rebuilt, live)) {
		return "its foreign keys change"
	}
	cols := map[string]bool{}
	for _, fk := range rebuilt.ForeignKeys {
		for _, c := range fk.Columns {
			cols[c.Name] = true
		}
	}
	for _, c := range changes {
		switch c := c.(type) {
		case *schema.AddForeignKey, *schema.DropForeignKey, *schema.ModifyForeignKey:
			return "its foreign keys change"
		case *schema.ModifyColumn:
			if cols[c.From.Name] || cols[c.To.Name] {
				return "foreign-key column " + c.To.Name + " changes"
			}
		case *schema.DropColumn:
			if cols[c.C.Name] {
				return "foreign-key column " + c.C.Name + " changes"
			}
		case *schema.RenameColumn:
			return "a column is renamed"
		}
	}
	return ""
}

// foreignKeyKeys spells each foreign key of t by what decides its
// violations and actions: its columns, its parent and the parent's columns,
// ON UPDATE and ON DELETE (absent = NO ACTION). A key on t itself names the
// live table, whatever t is called during the rebuild.
func foreignKeyKeys(t, live *schema.Table) []string {
	action := func(o schema.ReferenceOption) string {
		if o == "" {
			return string(schema.NoAction)
		}
		return strings.ToUpper(string(o))
	}
	out := make([]string, 0, len(t.ForeignKeys))
	for _, fk := range t.ForeignKeys {
		parent := ""
		if fk.RefTable != nil {
			parent = fk.RefTable.Name
			if fk.RefTable == t {
				parent = live.Name
			}
		}
		var cols, refCols []string
		for _, c := range fk.Columns {
			cols = append(cols, c.Name)
		}
		for _, c := range fk.RefColumns {
			refCols = append(refCols, c.Name)
		}
		out = append(out, fmt.Sprintf("(%s) %s(%s) %s %s", strings.Join(cols, ","), parent, strings.Join(refCols, ","), action(fk.OnUpdate), action(fk.OnDelete)))
	}
	slices.Sort(out)
	return out
}

// detail is the shape step's account of the rebuild.
func (r *rebuild) detail() string {
	if r.fkCheck == "" {
		return "rebuilt " + r.table + " (foreign_key_check skipped: rows copied verbatim under the same foreign keys, none onto the table)"
	}
	return "rebuilt " + r.table
}

// keptIndex is the statement that creates an undeclared index again after a
// rebuild: the operator's own CREATE INDEX as SQLite stored it. An inline
// UNIQUE (an autoindex, which has no statement and whose name SQLite
// reserves) becomes a named unique index over the same columns.
func keptIndex(ctx context.Context, drv migrate.Driver, q dialect.Querier, want *schema.Table, idx *schema.Index) ([]string, error) {
	stmts, err := queryStrings(ctx, q, `SELECT sql FROM sqlite_master WHERE type = 'index' AND name = ? AND sql IS NOT NULL`, idx.Name)
	if err != nil || len(stmts) > 0 {
		return stmts, err
	}
	named := *idx
	named.Name = want.Name + "_" + strings.Join(columnNames(idx), "_") + "_key"
	named.Table = want
	return render(ctx, drv, []schema.Change{&schema.ModifyTable{T: want, Changes: []schema.Change{&schema.AddIndex{I: &named}}}})
}

// apply runs the rebuild and refuses to let it commit unless every row was
// copied and no foreign-key violation appeared.
func (r *rebuild) apply(ctx context.Context, q dialect.Querier, fail func(string) error, say, executed func(string)) (int, error) {
	if err := r.refuseNulls(ctx, q); err != nil {
		return 0, err
	}
	before, err := r.fkViolations(ctx, q)
	if err != nil {
		return 0, err
	}
	var rows int64
	if err := q.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+dialect.QuoteIdent(r.table)).Scan(&rows); err != nil {
		return 0, err
	}
	say(fmt.Sprintf("rebuilding %s: copying %d rows", r.table, rows))
	// SQLite's RENAME re-parses every view and trigger in the schema; between
	// the DROP and the RENAME a view or another table's trigger that names the
	// table names nothing, and the RENAME fails. The legacy rename (SQLite's
	// documented rebuild predates the re-parse) renames the table alone; the
	// views and triggers resolve to the rebuilt table by name afterwards.
	var legacy int
	if err := q.QueryRowContext(ctx, "PRAGMA legacy_alter_table").Scan(&legacy); err != nil {
		return 0, err
	}
	if _, err := q.ExecContext(ctx, "PRAGMA legacy_alter_table = ON"); err != nil {
		return 0, err
	}
	defer func() {
		_, _ = q.ExecContext(context.Background(), fmt.Sprintf("PRAGMA legacy_alter_table = %d", legacy))
	}()
	n := 0
	for _, stmt := range r.statements() {
		res, err := q.ExecContext(ctx, stmt)
		if err != nil {
			return n, fmt.Errorf("%s: %w", firstLine(stmt), err)
		}
		executed(stmt)
		n++
		if stmt == r.copy {
			copied, err := res.RowsAffected()
			if err != nil {
				return n, fmt.Errorf("rebuild of %s: rows copied: %w", r.table, err)
			}
			if copied != rows {
				return n, fmt.Errorf("rebuild of %s copied %d of %d rows", r.table, copied, rows)
			}
			if err := fail(FailpointRebuildCopied); err != nil {
				return n, err
			}
		}
	}
	after, err := r.fkViolations(ctx, q)
	if err != nil {
		return n, err
	}
	if after > before {
		return n, fmt.Errorf("rebuild of %s introduced %d foreign-key violations", r.table, after-before)
	}
	return n, nil
}

// fkViolations counts foreign_key_check rows for the rebuilt table and every
// table that references it: none are counted, and no scan runs, when the
// rebuild cannot change them (fkCheckWhy).
func (r *rebuild) fkViolations(ctx context.Context, q dialect.Querier) (int, error) {
	if r.fkCheck == "" {
		return 0, nil
	}
	total := 0
	for _, t := range append([]string{r.table}, r.refs...) {
		rows, err := q.QueryContext(ctx, "PRAGMA foreign_key_check("+dialect.QuoteIdent(t)+")")
		if err != nil {
			return 0, err
		}
		for rows.Next() {
			total++
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return 0, err
		}
	}
	return total, nil
}

func queryStrings(ctx context.Context, q dialect.Querier, query string, args ...any) ([]string, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

func firstLine(s string) string {
	if i := strings.IndexAny(s, "(\n"); i > 0 && i < 80 {
		return strings.TrimSpace(s[:i])
	}
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}
