package postgres

// collationsQuery reads the index key parts of a table (in the current
// schema) whose collation is not their column's (core.ReadCollations).
const collationsQuery = `SELECT c.relname::text, k.o::int,
  CASE WHEN n.nspname = 'pg_catalog' THEN quote_ident(co.collname) ELSE quote_ident(n.nspname) || '.' || quote_ident(co.collname) END
 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
 CROSS JOIN LATERAL unnest(i.indkey::int2[], i.indcollation::oid[]) WITH ORDINALITY k(n, coll, o)
 JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.n
 JOIN pg_collation co ON co.oid = k.coll JOIN pg_namespace n ON n.oid = co.collnamespace
 WHERE i.indrelid = to_regclass(quote_ident(current_schema()) || '.' || quote_ident($1)) AND k.n <> 0 AND k.o <= i.indnkeyatts AND k.coll <> a.attcollation`
