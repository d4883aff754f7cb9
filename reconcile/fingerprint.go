package reconcile

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	schemastate "github.com/schemastate/schemastate"
	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/keys"
)

// The steady-state fast path.
//
// A boot on a store already in its declared shape must be cheap: the host
// boots often and replicas boot together. A full check — evaluating
// schema.hcl and inspecting the owned tables with Atlas — costs milliseconds
// on SQLite and tens of them on PostgreSQL. So when a full check finds nothing
// to change, the reconcile records a certificate in kandev_meta: the hash of
// the declaration, of the planner's rules (PlannerVersion) and of the build
// that checked it, the owned and host table names, the undeclared objects it
// kept (drift.go), and the hash of the live catalog entries of those tables
// (every column with its type, collation, default and comment, every index,
// constraint and trigger with its comment, as the catalog itself renders
// them). That hash covers at least everything the full check compares: a
// change the full check would act on always breaks it. The next boot reads the catalog in one query and,
// when everything matches and all three activation keys are present, knows
// the full check would find nothing: no Atlas, no DDL, no write. Any
// difference — a declaration edit, a new build, a column or index added by
// hand, a dropped host table — falls back to the full check, which is always
// correct. A certificate is written only after a full check found no change
// (never right after applying one), so a plan that did not converge is
// checked again.

// certificateKey is the kandev_meta row holding the certificate.
const certificateKey = "schemastate_shape_certificate"

// PlannerVersion names the rules by which a full check decides what to
// change: normalization, equivalent spellings, drift, refusals, widenings,
// the catalog rendering below. It is part of every certificate's declaration
// hash, so a build that changes those rules re-runs the full check once even
// where build info cannot tell builds apart — a test binary reports
// "(devel)", and a dirty tree keeps its commit's revision. Change it with
// any such rule.
const PlannerVersion = "2026-12-01.1"

// certificate is the kandev_meta value, stored as JSON.
type certificate struct {
	Version     string   `json:"v"`
	Declaration string   `json:"declaration"` // declarationHash
	Owned       []string `json:"owned"`       // table names the catalog hash covers
	Host        []string `json:"host"`
	Catalog     string   `json:"catalog"` // catalogHash
	// Drift is what the full check found undeclared and kept: a certified
	// boot reports it (WARN, Report.Drift) without inspecting.
	Drift []Drift `json:"drift,omitempty"`
}

func (c certificate) String() string {
	c.Version = PlannerVersion
	b, _ := json.Marshal(c)
	return string(b)
}

func parseCertificate(s string) (certificate, bool) {
	// Boot after boot reads the same certificate: the last one parsed is
	// kept (certificate holds only values, so a copy is never shared).
	if last := lastCertificate.Load(); last != nil && last.src == s {
		return last.c.clone(), true
	}
	var c certificate
	if err := json.Unmarshal([]byte(s), &c); err != nil || c.Version != PlannerVersion || len(c.Owned) == 0 {
		return certificate{}, false
	}
	lastCertificate.Store(&parsedCertificate{src: s, c: c.clone()})
	return c, true
}

// lastCertificate is the certificate parseCertificate parsed last.
var lastCertificate atomic.Pointer[parsedCertificate]

type parsedCertificate struct {
	src string
	c   certificate
}

func (c certificate) clone() certificate {
	c.Owned, c.Host, c.Drift = slices.Clone(c.Owned), slices.Clone(c.Host), slices.Clone(c.Drift)
	return c
}

// declarationHash identifies what a certificate vouches for: the declaration
// as evaluated for one dialect and schema, by one planner (PlannerVersion)
// in one build (this module's and Atlas's versions, and the host binary's own
// revision), so a new build re-runs the full check once.
func declarationHash(d dialect.Dialect, src []byte, schemaName string) string {
	builtIn := len(src) > 0 && len(src) == len(schemastate.SchemaHCL) && &src[0] == &schemastate.SchemaHCL[0]
	key := builtInKey{d, schemaName}
	if builtIn {
		if v, ok := builtInHashes.Load(key); ok {
			return v.(string)
		}
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00", PlannerVersion, d, schemaName)
	h.Write(buildIdentity())
	h.Write(src)
	sum := hex.EncodeToString(h.Sum(nil))[:32]
	if builtIn {
		builtInHashes.Store(key, sum)
	}
	return sum
}

// builtInHashes keeps declarationHash of the built-in declaration per
// dialect and schema: it cannot change while the process runs.
var builtInHashes sync.Map

type builtInKey struct {
	d      dialect.Dialect
	schema string
}

// buildIdentity is the part of declarationHash that names the build. It
// cannot change while the process runs, so it is read once, on the first
// boot that needs it.
var buildIdentity = sync.OnceValue(func() []byte {
	var b bytes.Buffer
	if bi, ok := debug.ReadBuildInfo(); ok {
		fmt.Fprintf(&b, "%s@%s\x00", bi.Main.Path, bi.Main.Version)
		for _, s := range bi.Settings {
			if strings.HasPrefix(s.Key, "vcs.") {
				fmt.Fprintf(&b, "%s=%s\x00", s.Key, s.Value)
			}
		}
		for _, m := range bi.Deps {
			if m.Path == "ariga.io/atlas" || m.Path == "github.com/schemastate/schemastate" {
				fmt.Fprintf(&b, "%s@%s%s\x00", m.Path, m.Version, m.Sum)
			}
		}
	}
	return b.Bytes()
})

// catalogHash hashes the live catalog entries of the owned tables, and the
// host tables (on SQLite their definitions, on PostgreSQL their presence), in
// one query.
func catalogHash(ctx context.Context, d dialect.Dialect, q dialect.Querier, owned, host []string) (string, error) {
	args := make([]any, 0, len(owned)+len(host))
	for _, n := range append(append([]string{}, owned...), host...) {
		args = append(args, n)
	}
	ownedIn := placeholders(d, 1, len(owned))
	hostIn := "NULL"
	if len(host) > 0 {
		hostIn = placeholders(d, len(owned)+1, len(host))
	}
	var query string
	if d == dialect.SQLite {
		// One pass over sqlite_master: every entry of the owned tables
		// (table, indexes, triggers, each with the SQL that made it, which
		// names its table) and the host tables with theirs. So on SQLite a
		// host migration that changes a host table sends the next boot to
		// the full check once, which certifies again. The entries are
		// sorted below, as an ORDER BY would sort them (bytewise), which
		// would cost SQLite a sorter for a few dozen rows.
		query = `SELECT type || ':' || name || ':' || COALESCE(sql, '') FROM sqlite_master
WHERE tbl_name IN (` + ownedIn + `) OR (type = 'table' AND name IN (` + hostIn + `))`
	} else {
		// Stored forms where a deparser would cost a lookup per row (an
		// index is its whole pg_index row, whatever columns this server
		// version has; a default its stored expression) and comments
		// joined rather than fetched per row (col_description,
		// obj_description): a definition's stored form changes whenever
		// its rendering does, so the hash still covers everything the
		// full check compares, at a third of the cost. (A REINDEX or
		// CLUSTER also changes an index's row: one full check.) Constraints and triggers keep their
		// deparsed form (a handful of rows; it names the referenced
		// table as it is called now).
		query = `WITH rel AS (
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
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	h := sha256.New()
	n := 0
	var s []byte
	for rows.Next() {
		if err := rows.Scan(&s); err != nil {
			return "", err
		}
		h.Write(s)
		h.Write([]byte{0})
		n++
	}
	if err := rows.Err(); err != nil {
		return "", err
	}
	return fmt.Sprintf("%d-%s", n, hex.EncodeToString(h.Sum(nil))[:32]), nil
}

func placeholders(d dialect.Dialect, from, n int) string {
	ps := make([]string, n)
	for i := range ps {
		ps[i] = d.Param(from + i)
	}
	return strings.Join(ps, ", ")
}

// certified reports whether this boot can take the fast path: the stored
// certificate matches this build's declaration and the live catalog, and all
// three activation keys are present. Any error means "no": the full check runs.
func (r *run) certified(ctx context.Context) (keys.Set, bool) {
	src, _, err := readDeclaration(r.o.schemaFile)
	if err != nil {
		return keys.Set{}, false
	}
	// The three keys and the certificate in one round trip.
	rows, err := r.sess.querier().QueryContext(ctx, r.o.dialect.Rebind(`SELECT key, value FROM kandev_meta WHERE key IN (?, ?, ?, ?)`),
		keys.CaptureSince, keys.BackfillThrough, keys.ExecutionSince, certificateKey)
	if err != nil {
		return keys.Set{}, false
	}
	var ks keys.Set
	var stored *string
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			rows.Close()
			return keys.Set{}, false
		}
		switch k {
		case keys.CaptureSince:
			ks.CaptureSince = &v
		case keys.BackfillThrough:
			ks.BackfillThrough = &v
		case keys.ExecutionSince:
			ks.ExecutionSince = &v
		case certificateKey:
			stored = &v
		}
	}
	if rows.Close() != nil || rows.Err() != nil || stored == nil || ks.CaptureSince == nil || ks.BackfillThrough == nil || ks.ExecutionSince == nil {
		return ks, false
	}
	c, ok := parseCertificate(*stored)
	if !ok || c.Declaration != declarationHash(r.o.dialect, src, r.sess.schemaName()) {
		return ks, false
	}
	// Pruning is work the certificate's full check left undone.
	if r.o.prune && len(c.Drift) > 0 {
		return ks, false
	}
	live, err := catalogHash(ctx, r.o.dialect, r.sess.querier(), c.Owned, c.Host)
	if err != nil || live != c.Catalog {
		return ks, false
	}
	r.rep.Drift = c.Drift
	return ks, true
}

// certify records a certificate for the live catalog, after a full check in
// this pass found no change to make and observed the whole end state. It is
// bookkeeping for the next boot: a failure is logged and changes nothing.
func (r *run) certify(ctx context.Context, q dialect.Querier) {
	// In a savepoint of its own: on PostgreSQL a failed statement would
	// otherwise abort the step's transaction and lose the key written in it.
	if _, err := q.ExecContext(ctx, "SAVEPOINT schemastate_certificate"); err != nil {
		return
	}
	if err := r.writeCertificate(ctx, q); err != nil {
		r.o.logger.Info("shape certificate not recorded", "error", err)
		_, _ = q.ExecContext(ctx, "ROLLBACK TO SAVEPOINT schemastate_certificate")
	} else {
		r.rep.Certified = true
	}
	_, _ = q.ExecContext(ctx, "RELEASE SAVEPOINT schemastate_certificate")
}

func (r *run) writeCertificate(ctx context.Context, q dialect.Querier) error {
	src, _, err := readDeclaration(r.o.schemaFile)
	if err != nil {
		return err
	}
	c := certificate{Declaration: declarationHash(r.o.dialect, src, r.schema), Host: r.decl.HostTables(), Drift: r.rep.Drift}
	for _, t := range r.decl.Owned {
		c.Owned = append(c.Owned, t.Name)
	}
	if c.Catalog, err = catalogHash(ctx, r.o.dialect, q, c.Owned, c.Host); err != nil {
		return err
	}
	value := c.String()
	stored, ok, err := keys.Get(ctx, q, r.o.dialect, certificateKey)
	if err != nil || (ok && stored == value) {
		return err
	}
	_, err = q.ExecContext(ctx, r.o.dialect.Rebind(`INSERT INTO kandev_meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value`), certificateKey, value)
	return err
}

// fastPath records the steps of a certified boot: everything is as the last
// full check left it.
func (r *run) fastPath(ks keys.Set) {
	r.rep.EndState = EndState{ExecutionColumnNotNull: true, ThreeColumnUnique: true, TwoColumnUniqueAbsent: true, IndexesMatchDeclaration: true}
	r.rep.EndStateObserved = true
	r.rep.Keys, r.rep.KeysRead = ks, true
	r.rep.Certified = true
	r.reportDrift()
	for _, s := range []Step{
		{Name: StepHostTables, Status: Unchanged, Detail: "present (certified)"},
		{Name: StepShape, Status: Unchanged, Detail: "declared shape holds (certified: catalog unchanged since the last full check)"},
		{Name: StepExecutionSince, Status: Unchanged, Detail: "key already present"},
		{Name: StepBackfill, Status: Unchanged, Detail: "both backfill keys present"},
	} {
		r.record(s)
	}
}
