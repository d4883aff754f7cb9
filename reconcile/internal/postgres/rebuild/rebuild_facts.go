package rebuild

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/readonly"
	"github.com/schemastate/schemastate/reconcile/internal/core"
	"github.com/schemastate/schemastate/reconcile/internal/postgres/pgsql"
)

// Facts is what planning the rebuild reads from the catalog.
type Facts struct {
	// blockers name what the rename cannot carry; any sends the widening to
	// the column-copy path.
	Blockers []string
	// fingerprint digests everything the swap carries over or refuses on.
	Fingerprint string
	// Indexes are the live table's indexes, constraints its constraints.
	Indexes     []LiveIndex
	foreignKeys []liveConstraint
	// carry are the swap's statements that carry grants, owner, comments
	// and sequences over, rendered against the final table name.
	carry []string
	// columnOptions set the live columns' planner options on the new table.
	columnOptions []string
	// exists says which artefacts are in the catalog; state is the state
	// row, when its table exists.
	NewExists, logExists, triggerExists, StateExists bool
	State                                            rebuildProgress
	// quoted is each declared column's name as the server's quote_ident
	// renders it (bare when lower-case and not a key word), so the dry run
	// predicts an index the shape phases build as pg_get_indexdef will read
	// it back (afterShape): the server keeps its own key-word list.
	Quoted map[string]string
}

// Quote is name as Quoted holds it, else quoted always (a name the facts
// did not read: the same index, spelled with quotes).
func (f *Facts) Quote(name string) string {
	if q, ok := f.Quoted[name]; ok {
		return q
	}
	return dialect.QuoteIdent(name)
}

// ReadQuoted reads quote_ident of each of names.
func ReadQuoted(ctx context.Context, q core.Querier, names []string) (map[string]string, error) {
	pairs, err := readonly.Rows(ctx, q, func(rows *sql.Rows) (p [2]string, err error) {
		return p, rows.Scan(&p[0], &p[1])
	}, `SELECT n, quote_ident(n) FROM unnest($1::text[]) AS n`, names)
	out := make(map[string]string, len(pairs))
	for _, p := range pairs {
		out[p[0]] = p[1]
	}
	return out, err
}

// LiveIndex is one of the live table's indexes, as the rebuild builds it
// again on its new table.
type LiveIndex struct {
	Name, Def      string // Def: pg_get_indexdef
	Prefix         string // how Def names the index and its table
	Contype        string // "p", "u" or "" (a plain index)
	ConstraintName string
}

type liveConstraint struct {
	name, def string
	validated bool
}

type rebuildProgress struct {
	pages, next, rows int64
	Fingerprint       string
	Swapped           bool
	Validate          []string
}

// Inflight says whether any of the rebuild's artefacts is in the catalog.
func (f *Facts) Inflight() bool {
	return f != nil && (f.NewExists || f.logExists || f.triggerExists || f.StateExists)
}

// rebuildFingerprintQuery digests the live table's heap file, indexes,
// constraints, columns, grants, owner, comments and what depends on it, the
// rebuild's own trigger excepted; $1 is the table. The heap file
// (relfilenode) is what the copy's page ranges address: a TRUNCATE — of the
// table, or of a table it references, CASCADE —, VACUUM FULL, CLUSTER or an
// ALTER that rewrites gives the table a new one, and none of them fires the
// log's row trigger, so a rebuild that saw one would swap in rows deleted
// since, or lose rows moved to pages already copied.
const rebuildFingerprintQuery = `SELECT md5(concat_ws('|',
 (SELECT relfilenode::text FROM pg_class WHERE oid = $1::regclass),
 (SELECT string_agg(pg_get_indexdef(i.indexrelid) || ':' || coalesce(obj_description(i.indexrelid, 'pg_class'), ''), ';' ORDER BY 1) FROM pg_index i WHERE i.indrelid = $1::regclass),
 (SELECT string_agg(conname || ':' || pg_get_constraintdef(oid) || ':' || convalidated || ':' || coalesce(obj_description(oid, 'pg_constraint'), ''), ';' ORDER BY 1) FROM pg_constraint WHERE conrelid = $1::regclass),
 (SELECT string_agg(attname || ':' || format_type(atttypid, atttypmod) || ':' || attnotnull || ':' || coalesce(pg_get_expr(d.adbin, d.adrelid), '') || ':' || coalesce(col_description(attrelid, attnum), '') || ':' || attstorage::text || ':' || attstattarget::text, ';' ORDER BY attnum)
   FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped),
 (SELECT coalesce(relacl::text, '') || ':' || relowner::regrole::text || ':' || coalesce(obj_description(oid, 'pg_class'), '') FROM pg_class WHERE oid = $1::regclass),
 (SELECT string_agg(tgname, ';' ORDER BY 1) FROM pg_trigger WHERE tgrelid = $1::regclass AND NOT tgisinternal AND tgname <> $2),
 (SELECT count(*)::text FROM pg_depend WHERE refobjid = $1::regclass AND classid = 'pg_rewrite'::regclass),
 (SELECT count(*)::text FROM pg_constraint WHERE confrelid = $1::regclass),
 (SELECT count(*)::text FROM pg_policy WHERE polrelid = $1::regclass),
 (SELECT string_agg(objid::regclass::text, ';' ORDER BY 1) FROM pg_depend WHERE refobjid = $1::regclass AND classid = 'pg_class'::regclass AND deptype = 'a'
   AND objid IN (SELECT oid FROM pg_class WHERE relkind = 'S'))))`

// fingerprintSQL is rebuildFingerprintQuery for the table, standalone.
func fingerprintSQL(qt, table string) string {
	return strings.NewReplacer("$1", pgsql.Literal(qt), "$2", pgsql.Literal(LogTable(table))).Replace(rebuildFingerprintQuery)
}

// rebuildBlockersQuery names what the rename cannot carry; $1 is the table,
// $2 the rebuild's own trigger.
const rebuildBlockersQuery = `SELECT DISTINCT format('view %s depends on it (a view binds to the table, not its name)', v.oid::regclass)
   FROM pg_depend d JOIN pg_rewrite w ON w.oid = d.objid JOIN pg_class v ON v.oid = w.ev_class
   WHERE d.classid = 'pg_rewrite'::regclass AND d.refobjid = $1::regclass AND v.oid <> $1::regclass
 UNION ALL SELECT format('rule %s', rulename) FROM pg_rewrite WHERE ev_class = $1::regclass
 UNION ALL SELECT format('foreign key %s of %s references it', conname, conrelid::regclass) FROM pg_constraint WHERE confrelid = $1::regclass
 UNION ALL SELECT format('trigger %s', tgname) FROM pg_trigger WHERE tgrelid = $1::regclass AND NOT tgisinternal AND tgname <> $2
 UNION ALL SELECT format('row-level security policy %s', polname) FROM pg_policy WHERE polrelid = $1::regclass
 UNION ALL SELECT 'row-level security enabled' FROM pg_class WHERE oid = $1::regclass AND (relrowsecurity OR relforcerowsecurity)
 UNION ALL SELECT format('publication %s', p.pubname) FROM pg_publication p WHERE p.puballtables OR EXISTS (SELECT 1 FROM pg_publication_rel r WHERE r.prpubid = p.oid AND r.prrelid = $1::regclass)
 UNION ALL SELECT 'inheritance or partitioning' FROM pg_inherits WHERE inhrelid = $1::regclass OR inhparent = $1::regclass
 UNION ALL SELECT 'partitioned, unlogged, temporary or in another tablespace' FROM pg_class WHERE oid = $1::regclass AND (relkind <> 'r' OR relpersistence <> 'p' OR reltablespace <> 0)
 UNION ALL SELECT 'storage parameters ' || array_to_string(reloptions, ', ') FROM pg_class WHERE oid = $1::regclass AND reloptions IS NOT NULL
 UNION ALL SELECT format('replica identity %s', relreplident) FROM pg_class WHERE oid = $1::regclass AND relreplident <> 'd'
 UNION ALL SELECT format('generated column %s', attname) FROM pg_attribute WHERE attrelid = $1::regclass AND attgenerated <> '' AND NOT attisdropped
 UNION ALL SELECT format('identity column %s', attname) FROM pg_attribute WHERE attrelid = $1::regclass AND attidentity <> '' AND NOT attisdropped
 UNION ALL SELECT format('privileges on column %s', attname) FROM pg_attribute WHERE attrelid = $1::regclass AND attacl IS NOT NULL AND NOT attisdropped
 UNION ALL SELECT format('%s constraint %s', CASE contype WHEN 'x' THEN 'exclusion' WHEN 't' THEN 'trigger' ELSE 'deferrable or NOT VALID' END, conname)
   FROM pg_constraint WHERE conrelid = $1::regclass AND (contype IN ('x', 't') OR condeferrable OR (NOT convalidated AND contype = 'c'))
 UNION ALL SELECT format('extended statistics %s', stxname) FROM pg_statistic_ext WHERE stxrelid = $1::regclass
 UNION ALL SELECT 'a security label' FROM pg_seclabel WHERE objoid = $1::regclass AND classoid = 'pg_class'::regclass
 UNION ALL SELECT format('index %s is not valid', indexrelid::regclass) FROM pg_index WHERE indrelid = $1::regclass AND NOT indisvalid
 ORDER BY 1`

// ReadFacts reads the rebuild's facts for a live table.
func ReadFacts(ctx context.Context, q core.Querier, schemaName, table string) (*Facts, error) {
	if len(StateTable(table)) > 63 {
		return &Facts{Blockers: []string{"its name is too long for the rebuild's table names"}}, nil
	}
	tbl := pgsql.Qualified(schemaName, table)
	trig := LogTable(table)
	f := &Facts{}
	var err error
	if f.Blockers, err = core.QueryStrings(ctx, q, rebuildBlockersQuery, tbl, trig); err != nil {
		return nil, fmt.Errorf("read what depends on %s: %w", table, err)
	}
	if err = q.QueryRowContext(ctx, rebuildFingerprintQuery, tbl, trig).Scan(&f.Fingerprint); err != nil {
		return nil, fmt.Errorf("fingerprint %s: %w", table, err)
	}
	if err = q.QueryRowContext(ctx, `SELECT to_regclass($1) IS NOT NULL, to_regclass($2) IS NOT NULL, to_regclass($3) IS NOT NULL,
  EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = $4::regclass AND tgname = $5)`,
		pgsql.Qualified(schemaName, NewTable(table)), pgsql.Qualified(schemaName, LogTable(table)), pgsql.Qualified(schemaName, StateTable(table)), tbl, trig).
		Scan(&f.NewExists, &f.logExists, &f.StateExists, &f.triggerExists); err != nil {
		return nil, fmt.Errorf("look for a rebuild of %s: %w", table, err)
	}
	if f.StateExists {
		if err := f.readState(ctx, q, pgsql.Qualified(schemaName, StateTable(table))); err != nil {
			return nil, fmt.Errorf("read the rebuild state of %s: %w", table, err)
		}
	}
	if err := f.readCarried(ctx, q, schemaName, table); err != nil {
		return nil, err
	}
	return f, nil
}

// readState reads the state row of a rebuild in flight.
func (f *Facts) readState(ctx context.Context, q core.Querier, qs string) error {
	var validate sql.NullString
	err := q.QueryRowContext(ctx, fmt.Sprintf(`SELECT pages, next_page, rows, fingerprint, swapped, array_to_string(validate, ',') FROM %s`, qs)).
		Scan(&f.State.pages, &f.State.next, &f.State.rows, &f.State.Fingerprint, &f.State.Swapped, &validate)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	if validate.String != "" {
		f.State.Validate = strings.Split(validate.String, ",")
	}
	return nil
}

// readCarried reads what the new table must carry over from the live one:
// column options, indexes, foreign keys, grants, owner, comments, owned
// sequences.
func (f *Facts) readCarried(ctx context.Context, q core.Querier, schemaName, table string) error {
	tbl := pgsql.Qualified(schemaName, table)
	var err error
	// Per-column planner options (n_distinct) and statistics targets, which
	// LIKE does not copy.
	if f.columnOptions, err = core.QueryStrings(ctx, q, `SELECT format('ALTER TABLE %s ALTER COLUMN %I SET (%s)', $2::text, attname, string_agg(o, ', '))
 FROM pg_attribute, unnest(attoptions) o WHERE attrelid = $1::regclass AND NOT attisdropped AND (o LIKE 'n\_distinct=%' OR o LIKE 'n\_distinct\_inherited=%') GROUP BY attname
 UNION ALL SELECT format('ALTER TABLE %s ALTER COLUMN %I SET STATISTICS %s', $2::text, attname, attstattarget)
 FROM pg_attribute WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped AND attstattarget >= 0 ORDER BY 1`,
		tbl, pgsql.Qualified(schemaName, NewTable(table))); err != nil {
		return fmt.Errorf("read the column options of %s: %w", table, err)
	}
	if f.Indexes, err = readonly.Rows(ctx, q, func(r *sql.Rows) (ix LiveIndex, err error) {
		err = r.Scan(&ix.Name, &ix.Def, &ix.Contype, &ix.ConstraintName, &ix.Prefix)
		return ix, err
	}, `SELECT c.relname, pg_get_indexdef(i.indexrelid), coalesce(con.Contype::text, ''), coalesce(con.conname, ''),
  format('INDEX %I ON %I.%I ', c.relname, n.nspname, t.relname)
 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_class t ON t.oid = i.indrelid JOIN pg_namespace n ON n.oid = t.relnamespace
 LEFT JOIN pg_constraint con ON con.conindid = i.indexrelid AND con.conrelid = i.indrelid AND con.Contype IN ('p', 'u', 'x')
 WHERE i.indrelid = $1::regclass ORDER BY 1`, tbl); err != nil {
		return fmt.Errorf("read the indexes of %s: %w", table, err)
	}
	for _, ix := range f.Indexes {
		if !strings.Contains(ix.Def, ix.Prefix) {
			f.Blockers = append(f.Blockers, fmt.Sprintf("index %s has a definition the rebuild does not read: %s", ix.Name, ix.Def))
		}
	}
	if f.foreignKeys, err = readonly.Rows(ctx, q, func(r *sql.Rows) (c liveConstraint, err error) {
		err = r.Scan(&c.name, &c.def, &c.validated)
		return c, err
	}, `SELECT conname, pg_get_constraintdef(oid), convalidated FROM pg_constraint WHERE conrelid = $1::regclass AND contype = 'f' ORDER BY 1`, tbl); err != nil {
		return fmt.Errorf("read the foreign keys of %s: %w", table, err)
	}
	// Grants exactly as the live table has them (the default ACL when it has
	// none), owner, comments on the table, its indexes and constraints, and
	// the sequences its columns own, rendered against the final name.
	f.carry, err = core.QueryStrings(ctx, q, `WITH t AS (SELECT oid, relowner, relacl FROM pg_class WHERE oid = $1::regclass)
SELECT format('ALTER TABLE %s OWNER TO %I', $2::text, pg_get_userbyid(relowner)) FROM t
UNION ALL SELECT format('GRANT %s ON TABLE %s TO %s%s', a.privilege_type, $2::text, CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(a.grantee)) END, CASE WHEN a.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END)
  FROM t, aclexplode(coalesce(t.relacl, acldefault('r', t.relowner))) a
UNION ALL SELECT format('COMMENT ON TABLE %s IS %L', $2::text, obj_description(oid, 'pg_class')) FROM t WHERE obj_description(oid, 'pg_class') IS NOT NULL
UNION ALL SELECT format('COMMENT ON INDEX %s IS %L', quote_ident(n.nspname) || '.' || quote_ident(c.relname), obj_description(c.oid, 'pg_class'))
  FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace
  WHERE i.indrelid = $1::regclass AND obj_description(c.oid, 'pg_class') IS NOT NULL
UNION ALL SELECT format('COMMENT ON CONSTRAINT %I ON %s IS %L', conname, $2::text, obj_description(oid, 'pg_constraint'))
  FROM pg_constraint WHERE conrelid = $1::regclass AND contype <> 'c' AND obj_description(oid, 'pg_constraint') IS NOT NULL
UNION ALL SELECT format('ALTER SEQUENCE %s OWNED BY %s.%I', d.objid::regclass, $2::text, a.attname)
  FROM pg_depend d JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
  WHERE d.refobjid = $1::regclass AND d.classid = 'pg_class'::regclass AND d.deptype = 'a'
   AND d.objid IN (SELECT oid FROM pg_class WHERE relkind = 'S')`, tbl, tbl)
	if err != nil {
		return fmt.Errorf("read the grants and comments of %s: %w", table, err)
	}
	return nil
}

// Notes describe a rebuild in flight, for status and plan.
func (f *Facts) Notes(table string) []string {
	var out []string
	switch {
	case f.State.Swapped:
		out = append(out, fmt.Sprintf("rebuilt table swapped in; %d foreign keys to validate", len(f.State.Validate)))
	case f.StateExists:
		out = append(out, fmt.Sprintf("rebuild table %s: %d rows copied, page %d of %d", NewTable(table), f.State.rows, min(f.State.next, f.State.pages), f.State.pages))
	case f.Inflight():
		out = append(out, "rebuild artefacts without their state ("+NewTable(table)+", "+LogTable(table)+")")
	}
	return out
}
