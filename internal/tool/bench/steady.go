package bench

import (
	"context"
	"crypto/sha256"
	"fmt"
	"strings"
	"time"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/declare"
	"github.com/schemastate/schemastate/internal/readonly"
	"github.com/schemastate/schemastate/internal/tool/bench/render"
	"github.com/schemastate/schemastate/keys"
	"github.com/schemastate/schemastate/reconcile"
)

// certificateRow is the kandev_meta row the reconcile keeps its shape
// certificate in: data a steady-state boot has to read, whoever wrote it.
const certificateRow = "schemastate_shape_certificate"

// steady measures a boot on a store already in shape — Reconcile with
// nothing to change — against its floor: one read of the three keys and the
// stored certificate and one catalog read of the owned tables and the host
// tables' presence, hashed and compared, without a lock (a certified boot
// takes none). It also checks
// that the boot ran no DDL: no step executed a statement, and the schema's
// catalog fingerprint (SQLite schema_version; PostgreSQL the pg_class rows
// of the schema) did not move.
func (b *bench) steady(ctx context.Context, rep *render.Report, family string, n, messages int) error {
	if r, err := reconcile.Reconcile(ctx, b.db, reconcile.WithLogger(b.quiet)); err != nil {
		return err
	} else if r.Keys.ExecutionSince == nil {
		return fmt.Errorf("%w: the store is not activated before the steady-state runs", errUnexpected)
	}
	name, err := readonly.SchemaName(ctx, b.db, b.d)
	if err != nil {
		return err
	}
	decl, err := declare.Load("", b.d, name)
	if err != nil {
		return err
	}
	r := &steadyRuns{b: b, ctx: ctx, host: decl.HostTables()}
	for _, t := range decl.Owned {
		r.owned = append(r.owned, t.Name)
	}
	before, err := b.fingerprint(ctx)
	if err != nil {
		return err
	}
	rows, err := b.count(ctx, "task_session_subagents")
	if err != nil {
		return err
	}
	m := render.Measurement{Name: render.SteadyState, Family: family, N: n, Rows: rows, Messages: messages, Target: 1.2,
		OursIs:  fmt.Sprintf("reconcile.Reconcile on a store in its declared shape, in process, wall time (each run the mean of %d boots, alternating boot by boot with the floor's)", steadyBoots),
		FloorIs: fmt.Sprintf("on a pinned connection and without a lock (a certified boot takes none), one read of the three keys and the certificate row and one catalog read of the owned tables and the host tables (raw catalog columns on PostgreSQL, one row per table with a subquery per catalog), hashed (each run the mean of %d)", steadyBoots)}
	var anchors []anchorRun
	if b.cfg.Exe != "" {
		anchors = append(anchors, anchorRun{render.AnchorCLI, "`schemastate reconcile --db …` as a child process, wall time", func(int) (time.Duration, error) {
			return b.cli("reconcile", "--db", b.dsn)
		}})
	}
	if err := b.measure(&m, b.cfg.runsAt(n), r.ours, r.floor, anchors...); err != nil {
		return err
	}
	after, err := b.fingerprint(ctx)
	if err != nil {
		return err
	}
	zero := r.ddl == 0 && before == after
	met := m.Met != nil && *m.Met && zero
	m.Met = &met
	m.ZeroDDL = &zero
	m.Detail = fmt.Sprintf("zero DDL: %v (%d statements, catalog fingerprint unchanged: %v); the lock step, which on a certified boot is the session and the certificate check (the keys read and the catalog read; no lock is taken), %s median, the rest of the boot %s",
		zero, r.ddl, before == after, median(r.lockSteps).Round(time.Microsecond), median(r.outside).Round(time.Microsecond))
	rep.Measurements = append(rep.Measurements, m)
	return nil
}

// steadyRuns are the two sides of the steady-state measurement. A boot takes
// a fraction of a millisecond, so one run is the mean of steadyBoots boots
// (and the floor's likewise): a single boot's time is mostly where the
// caches happen to be. The two sides alternate boot by boot within a run
// (floor, ours, floor, ours, …), so a slower moment of the machine falls on
// both alike: measure asks for the floor's run first, which takes both
// sides' boots, and then for ours, which returns its half.
type steadyRuns struct {
	b                  *bench
	ctx                context.Context
	owned, host        []string
	ddl                int
	lockSteps, outside []time.Duration
	// want is the floor's catalog hash, which must not move between runs.
	want string
	// oursMean is ours' mean of the run the floor's call took.
	oursMean time.Duration
}

func (r *steadyRuns) ours(int) (time.Duration, error) { return r.oursMean, nil }

func (r *steadyRuns) floor(int) (time.Duration, error) {
	var floor, ours time.Duration
	for k := 0; k < steadyBoots; k++ {
		d, err := r.floorBoot()
		if err != nil {
			return 0, err
		}
		floor += d
		if d, err = r.oursBoot(); err != nil {
			return 0, err
		}
		ours += d
	}
	r.oursMean = ours / steadyBoots
	return floor / steadyBoots, nil
}

func (r *steadyRuns) oursBoot() (time.Duration, error) {
	t0 := time.Now()
	rep, err := reconcile.Reconcile(r.ctx, r.b.db, reconcile.WithLogger(r.b.quiet))
	el := time.Since(t0)
	if err != nil {
		return 0, err
	}
	var in time.Duration
	for _, s := range rep.Steps {
		r.ddl += s.Statements
		in += s.Duration
		if s.Name == reconcile.StepLock {
			r.lockSteps = append(r.lockSteps, s.Duration)
		}
	}
	r.outside = append(r.outside, el-in)
	return el, nil
}

func (r *steadyRuns) floorBoot() (time.Duration, error) {
	d, sum, err := r.b.catalogFloor(r.ctx, r.owned, r.host)
	if err != nil {
		return 0, err
	}
	if r.want == "" {
		r.want = sum
	} else if sum != r.want {
		return 0, fmt.Errorf("%w: the floor's catalog hash moved between runs", errUnexpected)
	}
	return d, nil
}

// steadyBoots is how many boots (and floor reads) one steady-state run
// averages.
const steadyBoots = 100

func (b *bench) count(ctx context.Context, table string) (int, error) {
	var n int
	err := b.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+dialect.QuoteIdent(table)).Scan(&n)
	return n, err
}

func (b *bench) fingerprint(ctx context.Context) (string, error) {
	var s string
	err := b.db.QueryRowContext(ctx, b.on.fingerprint).Scan(&s)
	return s, err
}

// The floor's catalog reads, written for the floor: what changes whenever a
// column, default, index, constraint or trigger of an owned table changes,
// and which host tables exist. On PostgreSQL one row per table in a fixed
// order, each owned table's catalogs an array from a subquery on that one
// catalog by the table's oid: the cheapest form of this read measured (the
// UNION ALL of a join per catalog it replaced cost its planner 0.15–0.25 ms
// more; docs/benchmarks.md).
const (
	floorCatalogSQLite = `SELECT type || ':' || name || ':' || COALESCE(sql, '') FROM sqlite_master
WHERE tbl_name IN (%s) OR (type = 'table' AND name IN (%s))`
	floorCatalogPostgres = `SELECT CASE WHEN c.relname = ANY (string_to_array($1, ',')) THEN c.relname
  || ARRAY(SELECT a.attnum || a.attname || a.atttypid || ',' || a.atttypmod || a.attnotnull FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum)::text
  || ARRAY(SELECT d.adnum || d.adbin::text FROM pg_attrdef d WHERE d.adrelid = c.oid ORDER BY d.adnum)::text
  || ARRAY(SELECT i.indexrelid || i.indkey::text || i.indisunique || i.indisvalid || COALESCE(i.indexprs::text, '') || COALESCE(i.indpred::text, '') FROM pg_index i WHERE i.indrelid = c.oid ORDER BY i.indexrelid)::text
  || ARRAY(SELECT k.conname || k.contype::text || COALESCE(k.conkey::text, '') || k.confrelid || COALESCE(k.confkey::text, '') || k.confdeltype::text || k.condeferrable FROM pg_constraint k WHERE k.conrelid = c.oid ORDER BY k.oid)::text
  || ARRAY(SELECT g.tgname || g.tgfoid || g.tgtype FROM pg_trigger g WHERE g.tgrelid = c.oid AND NOT g.tgisinternal ORDER BY g.oid)::text
  ELSE 'h' || c.relname END
FROM pg_class c WHERE c.relnamespace = current_schema()::regnamespace AND c.relname = ANY (string_to_array($1 || ',' || $2, ','))
ORDER BY 1`
)

// catalogFloor is the steady-state floor on one pinned connection; it
// returns its duration and the catalog hash it read.
func (b *bench) catalogFloor(ctx context.Context, owned, host []string) (time.Duration, string, error) {
	conn, err := b.db.Conn(ctx)
	if err != nil {
		return 0, "", err
	}
	defer conn.Close()
	h := sha256.New()
	hashRows := func(q string, args ...any) error {
		rows, err := conn.QueryContext(ctx, q, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				return err
			}
			h.Write([]byte(s))
		}
		return rows.Err()
	}
	readKeys := func() error {
		return hashRows(b.d.Rebind(`SELECT key || '=' || value FROM kandev_meta WHERE key IN (?, ?, ?, ?)`),
			keys.CaptureSince, keys.BackfillThrough, keys.ExecutionSince, certificateRow)
	}
	// A certified boot takes no lock (reconcile checks the certificate
	// before taking one, in a deferred read transaction), so neither does
	// the floor: the two reads, each in its own implicit read transaction.
	catalog, args := b.on.floorCatalog(owned, host)
	t0 := time.Now()
	if err := readKeys(); err != nil {
		return 0, "", err
	}
	if err := hashRows(catalog, args...); err != nil {
		return 0, "", err
	}
	return time.Since(t0), fmt.Sprintf("%x", h.Sum(nil)), nil
}

func marks(n int) string { return strings.TrimSuffix(strings.Repeat("?, ", n), ", ") }

func anys(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}
