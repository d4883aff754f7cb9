package reconcile

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"time"

	"ariga.io/atlas/sql/migrate"
	"ariga.io/atlas/sql/postgres"
	"ariga.io/atlas/sql/schema"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/zclconf/go-cty/cty"

	"github.com/schemastate/schemastate/dialect"
)

// PostgreSQL's driver: its declaration, catalog reads and planning
// (postgres_plan.go), its session and applier (below, postgres_apply.go).
type postgresDriver struct{}

func (postgresDriver) dialect() dialect.Dialect { return dialect.Postgres }

func (postgresDriver) open(ctx context.Context, db *sql.DB, o *options) (session, error) {
	return openPostgres(ctx, db, o)
}

func (postgresDriver) schemaName(ctx context.Context, q querier) (string, error) {
	var s string
	err := q.QueryRowContext(ctx, "SELECT current_schema()").Scan(&s)
	return s, err
}

func (postgresDriver) atlas(q querier) (migrate.Driver, error) { return postgres.Open(q) }

func (postgresDriver) evalHCL(src []byte, s *schema.Schema, vars map[string]cty.Value) error {
	return postgres.EvalHCLBytes(src, s, vars)
}

// declared: a unique index in the declaration is a UNIQUE constraint on
// PostgreSQL (schema.hcl header; atlas-and-dialect-facts.md).
func (postgresDriver) declared(t *schema.Table) {
	for _, idx := range t.Indexes {
		if idx.Unique {
			idx.AddAttrs(postgres.UniqueConstraint(idx.Name))
		}
	}
}

func (postgresDriver) formatType(t schema.Type) (string, error) { return postgres.FormatType(t) }

func (postgresDriver) tablesQuery(n int) string {
	return `SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() AND table_name IN (` + placeholders(dialect.Postgres, 1, n) + `)`
}

// catalogQuery reads stored forms where a deparser would cost a lookup per
// row (an index is its whole pg_index row, whatever columns this server
// version has; a default its stored expression) and joins comments rather
// than fetching them per row (col_description, obj_description): a
// definition's stored form changes whenever its rendering does, so the hash
// still covers everything the full check compares, at a third of the cost.
// (A REINDEX or CLUSTER also changes an index's row: one full check.)
// Constraints and triggers keep their deparsed form (a handful of rows; it
// names the referenced table as it is called now).
func (postgresDriver) catalogQuery(ownedIn, hostIn string) string {
	return `WITH rel AS (
  SELECT c.oid, c.relname, c.relkind, c.relpersistence, c.reloptions FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
  WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p') AND c.relname IN (` + ownedIn + `)
)
SELECT 'col:' || rel.relname || ':' || a.attnum::text || ':' || a.attname || ':' || format_type(a.atttypid, a.atttypmod) || ':' || COALESCE(coll.collname, '') || ':' || a.attnotnull::text || ':' || a.attidentity::text || ':' || a.attgenerated::text || ':' || COALESCE(ad.adbin::text, '') || ':' || COALESCE(d.description, '')
  FROM rel JOIN pg_attribute a ON a.attrelid = rel.oid AND a.attnum > 0 AND NOT a.attisdropped
  LEFT JOIN pg_attrdef ad ON ad.adrelid = rel.oid AND ad.adnum = a.attnum
  LEFT JOIN pg_collation coll ON coll.oid = a.attcollation
  LEFT JOIN pg_description d ON d.objoid = rel.oid AND d.classoid = 'pg_class'::regclass AND d.objsubid = a.attnum
UNION ALL SELECT 'idx:' || rel.relname || ':' || ic.relname || ':' || ic.relam::text || ':' || i::text || ':' || COALESCE(array_to_string(ic.reloptions, ','), '') || ':' || COALESCE(d.description, '')
  FROM rel JOIN pg_index i ON i.indrelid = rel.oid JOIN pg_class ic ON ic.oid = i.indexrelid
  LEFT JOIN pg_description d ON d.objoid = i.indexrelid AND d.classoid = 'pg_class'::regclass AND d.objsubid = 0
UNION ALL SELECT 'con:' || rel.relname || ':' || con.conname || ':' || con.contype::text || ':' || pg_get_constraintdef(con.oid) || ':' || con.condeferrable::text || ':' || con.condeferred::text || ':' || con.convalidated::text || ':' || COALESCE(d.description, '')
  FROM rel JOIN pg_constraint con ON con.conrelid = rel.oid
  LEFT JOIN pg_description d ON d.objoid = con.oid AND d.classoid = 'pg_constraint'::regclass AND d.objsubid = 0
UNION ALL SELECT 'trg:' || rel.relname || ':' || pg_get_triggerdef(t.oid) || ':' || t.tgenabled::text
  FROM rel JOIN pg_trigger t ON t.tgrelid = rel.oid AND NOT t.tgisinternal
UNION ALL SELECT 'tbl:' || rel.relname || ':' || rel.relkind::text || ':' || rel.relpersistence::text || ':' || COALESCE(array_to_string(rel.reloptions, ','), '') || ':' || COALESCE(d.description, '')
  FROM rel LEFT JOIN pg_description d ON d.objoid = rel.oid AND d.classoid = 'pg_class'::regclass AND d.objsubid = 0
UNION ALL SELECT 'host:' || c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
  WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p') AND c.relname IN (` + hostIn + `)
ORDER BY 1`
}

// facts reads the table's DEFERRABLE unique constraints, its INVALID
// indexes (an online build that crashed or failed) and its size, which
// chooses the path.
func (postgresDriver) facts(ctx context.Context, q querier, schemaName string, live, _ *schema.Table) (tableFacts, error) {
	var f tableFacts
	var err error
	if f.deferrable, err = deferrableUniques(ctx, q, live.Name); err != nil {
		return f, err
	}
	if f.invalid, err = queryStrings(ctx, q, `SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
 WHERE i.indrelid = to_regclass($1) AND NOT i.indisvalid ORDER BY 1`, qualified(schemaName, live.Name)); err != nil {
		return f, fmt.Errorf("read invalid indexes of %s: %w", live.Name, err)
	}
	if f.size, err = readTableSize(ctx, q, schemaName, live.Name); err != nil {
		return f, fmt.Errorf("read the size of %s: %w", live.Name, err)
	}
	return f, nil
}

func (postgresDriver) observable(ctx context.Context, q querier, live *schema.Table) error {
	return dropDeferrableUniques(ctx, q, live)
}

func (postgresDriver) explain(err error) error { return withDetail(err) }

// PostgreSQL: the lock is a session advisory lock taken on the same pinned
// connection that runs every step, so the lock can never starve the
// reconcile's own transactions. Each step is its own transaction with a
// lock_timeout: ALTER TABLE … ADD CONSTRAINT holds ACCESS EXCLUSIVE, and a
// waiting ALTER queues every later reader behind it, so the wait is bounded
// and a timeout fails the step (rolled back, retried next boot).
//
// Session advisory locks do not survive a transaction-mode connection pooler
// (the session is not the client's); point the reconcile at the server or at
// a session-mode pool.
//
// The certificate is checked before the lock is taken, so a steady-state boot
// never waits for another replica's reconcile; a boot with work takes the
// lock and checks again under it.

type pgSession struct {
	conn   *sql.Conn
	db     *sql.DB // for progress reports while conn builds an index
	pid    int     // conn's backend
	schema string  // current_schema(), where the reconcile works
	ident  string  // database.schema, named when the lock is not acquired
	key    int64
	locked bool
	tx     *sql.Tx
	o      *options
}

func openPostgres(ctx context.Context, db *sql.DB, o *options) (*pgSession, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	s := &pgSession{conn: conn, db: db, o: o}
	var database string
	if err := conn.QueryRowContext(ctx, `SELECT current_database(), current_schema(), pg_backend_pid()`).Scan(&database, &s.schema, &s.pid); err != nil {
		conn.Close()
		return nil, err
	}
	ident := database + "." + s.schema
	h := fnv.New64a()
	h.Write([]byte("schemastate/reconcile:" + ident))
	s.key, s.ident = int64(h.Sum64()), ident
	return s, nil
}

// lock takes the advisory lock, polling for up to the lock wait.
func (s *pgSession) lock(ctx context.Context) error {
	deadline := time.Now().Add(s.o.lockWait)
	for {
		var got bool
		if err := s.conn.QueryRowContext(ctx, `SELECT pg_try_advisory_lock($1)`, s.key).Scan(&got); err != nil {
			return err
		}
		if got {
			s.locked = true
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w on %s; gave up after %s", ErrLockHeld, s.ident, s.o.lockWait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (s *pgSession) querier() dialect.Querier { return s.conn }

func (s *pgSession) schemaName() string { return s.schema }

func (s *pgSession) begin(ctx context.Context, step string) (dialect.Querier, error) {
	tx, err := s.conn.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	if _, err := tx.ExecContext(ctx, fmt.Sprintf("SET LOCAL lock_timeout = '%dms'", s.o.ddlLockTimeout.Milliseconds())); err != nil {
		tx.Rollback()
		return nil, err
	}
	s.tx = tx
	return tx, nil
}

func (s *pgSession) end(ctx context.Context, ok bool) error {
	tx := s.tx
	s.tx = nil
	if !ok {
		return tx.Rollback()
	}
	return tx.Commit()
}

// close releases the lock. Every step has already committed or rolled back
// in its own transaction, so nothing here can undo a step: a failed unlock is
// not a step failure. The connection is then discarded rather than returned to
// the pool — the server drops a session's advisory locks with the session, so
// the lock can never outlive this reconcile on a pooled connection.
func (s *pgSession) close(ctx context.Context) error {
	s.unlock()
	return nil
}

func (s *pgSession) abort() {
	if s.tx != nil {
		s.tx.Rollback()
	}
	s.unlock()
}

func (s *pgSession) unlock() {
	if !s.locked {
		s.conn.Close()
		return
	}
	if _, err := s.conn.ExecContext(context.Background(), `SELECT pg_advisory_unlock($1)`, s.key); err != nil {
		s.o.logger.Warn("reconcile lock: unlock failed; connection discarded, which releases the lock", "error", err)
		_ = s.conn.Raw(func(any) error { return sqldriver.ErrBadConn })
	}
	s.conn.Close()
}

// withDetail appends PostgreSQL's DETAIL and HINT to err: they name the
// object that blocked a statement (the view that reads a column, say), which
// the error message alone does not.
func withDetail(err error) error {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || (pe.Detail == "" && pe.Hint == "") {
		return err
	}
	extra := pe.Detail
	if pe.Hint != "" {
		extra = strings.TrimSpace(extra + " " + pe.Hint)
	}
	return fmt.Errorf("%w: %s", err, extra)
}

// renameEquivalentUniques finds, on PostgreSQL, a live UNIQUE constraint that
// is a declared one under another name — the host's own DDL leaves the
// three-column key auto-named — and plans a RENAME CONSTRAINT instead of the
// drop and re-add a name-based diff would plan (which rebuilds the unique
// index under an ACCESS EXCLUSIVE lock). The live table is updated to the
// declared name so the diff sees the same constraint. A partial index, a
// plain unique index and a column order that differs are never equivalent.
func renameEquivalentUniques(schemaName string, live, want *schema.Table, deferrable map[string]bool) []string {
	var stmts []string
	for _, idx := range live.Indexes {
		if !isUniqueConstraint(idx) || deferrable[idx.Name] {
			continue
		}
		if _, declared := want.Index(idx.Name); declared {
			continue
		}
		for _, w := range want.Indexes {
			if _, taken := live.Index(w.Name); taken || !w.Unique || !sameColumns(idx, w) || hasPredicate(idx) {
				continue
			}
			stmts = append(stmts, fmt.Sprintf("ALTER TABLE %s.%s RENAME CONSTRAINT %s TO %s",
				dialect.QuoteIdent(schemaName), dialect.QuoteIdent(live.Name), dialect.QuoteIdent(idx.Name), dialect.QuoteIdent(w.Name)))
			idx.Name = w.Name
			idx.Attrs = append([]schema.Attr(nil), w.Attrs...)
			break
		}
	}
	return stmts
}

func isUniqueConstraint(idx *schema.Index) bool {
	for _, a := range idx.Attrs {
		if c, ok := a.(*postgres.Constraint); ok && c.T == "u" {
			return idx.Unique
		}
	}
	return false
}

func hasPredicate(idx *schema.Index) bool {
	for _, a := range idx.Attrs {
		if _, ok := a.(*postgres.IndexPredicate); ok {
			return true
		}
	}
	return false
}

// dropDeferrableUniques removes DEFERRABLE unique constraints from an
// inspected PostgreSQL table before the end state is observed. Atlas does not
// model deferrability, and INSERT … ON CONFLICT cannot use a deferrable
// constraint as its arbiter, so such a constraint is not AC-33 clause 2: the
// live upsert would fail against it, and execution_since must not be published.
func dropDeferrableUniques(ctx context.Context, q dialect.Querier, live *schema.Table) error {
	if live == nil {
		return nil
	}
	deferrable, err := deferrableUniques(ctx, q, live.Name)
	if err != nil {
		return err
	}
	kept := live.Indexes[:0:0]
	for _, idx := range live.Indexes {
		if !deferrable[idx.Name] {
			kept = append(kept, idx)
		}
	}
	live.Indexes = kept
	return nil
}

// replaceDeferrableKeys plans, on PostgreSQL, replacing a declared unique
// constraint that is live but DEFERRABLE: it is not the declared key (no ON
// CONFLICT arbiter, see dropDeferrableUniques), yet Atlas's diff, blind to
// deferrability, sees no change, and every boot would observe the end state
// missing and change nothing. The constraint is removed from the live table,
// so the diff adds the declared one, and dropped first by the returned
// statement, in the same transaction. deferrable names every deferrable
// unique (tableFacts), which renameEquivalentUniques never adopts either.
func replaceDeferrableKeys(schemaName string, live, want *schema.Table, deferrable map[string]bool) []string {
	var stmts []string
	kept := live.Indexes[:0:0]
	for _, idx := range live.Indexes {
		if _, declared := want.Index(idx.Name); declared && deferrable[idx.Name] {
			stmts = append(stmts, fmt.Sprintf("ALTER TABLE %s.%s DROP CONSTRAINT %s",
				dialect.QuoteIdent(schemaName), dialect.QuoteIdent(live.Name), dialect.QuoteIdent(idx.Name)))
			continue
		}
		kept = append(kept, idx)
	}
	live.Indexes = kept
	return stmts
}

func deferrableUniques(ctx context.Context, q querier, table string) (map[string]bool, error) {
	names, err := queryStrings(ctx, q, `SELECT con.conname FROM pg_constraint con
  JOIN pg_class c ON c.oid = con.conrelid JOIN pg_namespace n ON n.oid = c.relnamespace
  WHERE n.nspname = current_schema() AND c.relname = $1 AND con.contype = 'u' AND con.condeferrable`, table)
	if err != nil {
		return nil, err
	}
	deferrable := map[string]bool{}
	for _, n := range names {
		deferrable[n] = true
	}
	return deferrable, nil
}
