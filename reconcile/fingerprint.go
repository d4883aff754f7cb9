package reconcile

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	schemastate "github.com/schemastate/schemastate"
	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/declare"
	"github.com/schemastate/schemastate/keys"
	"github.com/schemastate/schemastate/reconcile/internal/core"
)

// The steady-state fast path.
//
// A boot on a store already in its declared shape must be cheap: the host
// boots often and replicas boot together. A full check — evaluating
// schema.hcl and inspecting the owned tables with Atlas — costs milliseconds
// on SQLite and tens of them on PostgreSQL. So when a full check finds nothing
// to change, the reconcile records a certificate in kandev_meta: the hash of
// the declaration, of the planner's rules (plannerVersion) and of the build
// that checked it, the owned, host and parent table names, the undeclared objects it
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
// checked again, and never while a foreign key of an owned table names a
// table that does not exist (parentReader).

// certificateKey is the kandev_meta row holding the certificate.
const certificateKey = "schemastate_shape_certificate"

// certifiedRows is the certified boot's first read: the three keys and the
// certificate.
var certifiedRows = sync.OnceValue(func() *core.MetaRows {
	return core.NewMetaRows(keys.CaptureSince, keys.BackfillThrough, keys.ExecutionSince, certificateKey)
})

// plannerVersion names the rules by which a full check decides what to
// change: normalization, equivalent spellings, drift, refusals, widenings,
// the catalog rendering below. It is part of every certificate's declaration
// hash, so a build that changes those rules re-runs the full check once even
// where build info cannot tell builds apart — a test binary reports
// "(devel)", and a dirty tree keeps its commit's revision. Change it with
// any such rule.
const plannerVersion = "2026-12-05.1"

// certificate is the kandev_meta value, stored as JSON.
type certificate struct {
	Version     string   `json:"v"`
	Declaration string   `json:"declaration"` // declarationHash
	Owned       []string `json:"owned"`       // table names the catalog hash covers
	Host        []string `json:"host"`
	// Parents are the other tables the owned tables' foreign keys name
	// (parentReader): the catalog hash covers them as it covers the host
	// tables, so a boot after one is dropped takes the full check.
	Parents []string `json:"parents,omitempty"`
	Catalog string   `json:"catalog"` // catalogHash
	// Scope is what the catalog read is keyed on besides the names
	// (core.Driver.CatalogScope: PostgreSQL's oids), read with Catalog.
	Scope string `json:"scope,omitempty"`
	// Drift is what the full check found undeclared and kept: a certified
	// boot reports it (WARN, Report.Drift) without inspecting.
	Drift []Drift `json:"drift,omitempty"`
}

func (c certificate) String() string {
	c.Version = plannerVersion
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
	if err := json.Unmarshal([]byte(s), &c); err != nil || c.Version != plannerVersion || len(c.Owned) == 0 {
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
	c.Owned, c.Host, c.Parents, c.Drift = slices.Clone(c.Owned), slices.Clone(c.Host), slices.Clone(c.Parents), slices.Clone(c.Drift)
	return c
}

// declarationHash identifies what a certificate vouches for: the declaration
// as evaluated for one dialect and schema, by one planner (plannerVersion)
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
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00", plannerVersion, d, schemaName)
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

// errDanglingForeignKey refuses a certificate for a catalog in which a
// foreign key of an owned table names no table.
var errDanglingForeignKey = errors.New("a foreign key names a table that does not exist (every write to its table fails while foreign keys are on)")

// catalogHash hashes the live catalog entries of the owned tables, and the
// covered ones (on SQLite their definitions, on PostgreSQL their pg_class
// rows), in one query (core.Driver.CatalogRead) keyed on scope.
func catalogHash(ctx context.Context, drv core.Driver, q core.Querier, owned, covered []string, scope string) (string, error) {
	query, args, ok := drv.CatalogRead(owned, covered, scope)
	if !ok {
		return "", errors.New("the certificate's catalog scope is not one this build writes")
	}
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	h := sha256.New()
	n := 0
	var s sql.RawBytes
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
	var sum [sha256.Size]byte
	return strconv.Itoa(n) + "-" + hex.EncodeToString(h.Sum(sum[:0])[:16]), nil
}

// certified reports whether this boot can take the fast path: the stored
// certificate matches this build's declaration and the live catalog, and all
// three activation keys are present. Any error means "no": the full check runs.
func (r *run) certified(ctx context.Context, sess core.Session) (keys.Set, bool) {
	src, _, err := r.o.declaration()
	if err != nil {
		return keys.Set{}, false
	}
	// The three keys and the certificate in one round trip (with the
	// session's identity, on PostgreSQL).
	meta, err := sess.Meta(ctx, certifiedRows())
	if err != nil {
		return keys.Set{}, false
	}
	ks := keys.Set{CaptureSince: present(meta, keys.CaptureSince), BackfillThrough: present(meta, keys.BackfillThrough), ExecutionSince: present(meta, keys.ExecutionSince)}
	stored, ok := meta[certificateKey]
	if !ok || ks.CaptureSince == nil || ks.BackfillThrough == nil || ks.ExecutionSince == nil {
		return ks, false
	}
	c, ok := parseCertificate(stored)
	if !ok || c.Declaration != declarationHash(r.o.dialect, src, sess.SchemaName()) {
		return ks, false
	}
	// Pruning is work the certificate's full check left undone.
	if r.o.prune && len(c.Drift) > 0 {
		return ks, false
	}
	live, err := catalogHash(ctx, r.drv, sess.Querier(), c.Owned, c.covered(), c.Scope)
	if err != nil || live != c.Catalog {
		return ks, false
	}
	r.rep.Drift = c.Drift
	return ks, true
}

// present is m's value of key, or nil when m holds none.
func present(m map[string]string, key string) *string {
	if v, ok := m[key]; ok {
		return &v
	}
	return nil
}

// covered are the tables besides the owned ones whose catalog entries the
// certificate's hash covers: the host tables and the parents.
func (c certificate) covered() []string {
	return append(slices.Clone(c.Host), c.Parents...)
}

// parentReader is a driver on which a foreign key can name a table that
// does not exist (SQLite: DROP TABLE drops a table a key names, and a
// rename leaves a key naming the old name). foreignKeyParents returns the
// tables the owned tables' keys name, spelled as the catalog spells them,
// and describes each key that names no table. PostgreSQL's driver is none:
// there a key always names a table (DROP TABLE refuses to drop it, or drops
// the key with CASCADE).
type parentReader interface {
	ForeignKeyParents(ctx context.Context, q core.Querier, owned []string) (parents, dangling []string, err error)
}

// certify records a certificate for the live catalog, after a full check in
// this pass found no change to make and observed the whole end state. It is
// bookkeeping for the next boot: a failure is logged and changes nothing.
func (r *run) certify(ctx context.Context, q core.Querier, decl *declare.Declaration, schemaName string) {
	// In a savepoint of its own: on PostgreSQL a failed statement would
	// otherwise abort the step's transaction and lose the key written in it.
	if _, err := q.ExecContext(ctx, "SAVEPOINT schemastate_certificate"); err != nil {
		return
	}
	if err := r.writeCertificate(ctx, q, decl, schemaName); err != nil {
		if errors.Is(err, errDanglingForeignKey) {
			r.o.logger.Warn("shape certificate not recorded: the next boot runs the full check again", "dialect", string(r.o.dialect), "error", err)
		} else {
			r.o.logger.Info("shape certificate not recorded", "error", err)
		}
		_, _ = q.ExecContext(ctx, "ROLLBACK TO SAVEPOINT schemastate_certificate")
	} else {
		r.rep.Certified = true
	}
	_, _ = q.ExecContext(ctx, "RELEASE SAVEPOINT schemastate_certificate")
}

func (r *run) writeCertificate(ctx context.Context, q core.Querier, decl *declare.Declaration, schemaName string) error {
	src, _, err := r.o.declaration()
	if err != nil {
		return err
	}
	c, err := r.catalogState(ctx, q, decl, true)
	if err != nil {
		return err
	}
	c.Declaration, c.Drift = declarationHash(r.o.dialect, src, schemaName), r.rep.Drift
	if r.compared != nil {
		// The shape step compared the catalog as it stood when it began;
		// host DDL committed since (each step commits on its own) was never
		// compared, and a certificate over it would hide it from every boot
		// to come.
		if r.compared.err != nil {
			return fmt.Errorf("the catalog was not read before the full check: %w", r.compared.err)
		}
		if r.compared.state.Scope != c.Scope || r.compared.state.Catalog != c.Catalog {
			return errors.New("the catalog changed after the full check compared it")
		}
	}
	value := c.String()
	stored, ok, err := keys.Get(ctx, q, r.o.dialect, certificateKey)
	if err != nil || (ok && stored == value) {
		return err
	}
	_, err = q.ExecContext(ctx, r.o.dialect.Rebind(`INSERT INTO kandev_meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value`), certificateKey, value)
	return err
}

// catalogState is what a certificate records of the live catalog: the
// tables it covers, the driver's scope and the catalog's hash over them.
// recheck reads the scope again after the hash, as a certificate written
// from it needs; a state only compared with the certificate's own (the
// shape step's, compared) needs no second read: an object added between
// its two reads is in the certificate's scope and not in its own, and the
// two differ.
func (r *run) catalogState(ctx context.Context, q core.Querier, decl *declare.Declaration, recheck bool) (certificate, error) {
	c := certificate{Host: decl.HostTables()}
	for _, t := range decl.Owned {
		c.Owned = append(c.Owned, t.Name)
	}
	if pr, ok := r.drv.(parentReader); ok {
		parents, dangling, err := pr.ForeignKeyParents(ctx, q, c.Owned)
		if err != nil {
			return c, err
		}
		if len(dangling) > 0 {
			return c, fmt.Errorf("%w: %s", errDanglingForeignKey, strings.Join(dangling, "; "))
		}
		for _, p := range parents {
			if !slices.Contains(c.Owned, p) && !slices.Contains(c.Host, p) {
				c.Parents = append(c.Parents, p)
			}
		}
	}
	var err error
	if c.Scope, err = r.drv.CatalogScope(ctx, q, c.Owned, c.covered()); err != nil {
		return c, err
	}
	if c.Catalog, err = catalogHash(ctx, r.drv, q, c.Owned, c.covered(), c.Scope); err != nil {
		return c, err
	}
	// The scope read again: an object added to an owned table between the
	// two reads would be in the hash but not in the scope, and so not
	// covered by name or comment on the boots to come.
	if !recheck {
		return c, nil
	}
	if again, err := r.drv.CatalogScope(ctx, q, c.Owned, c.covered()); err != nil || again != c.Scope {
		return c, errors.Join(errors.New("the catalog changed while it was read"), err)
	}
	return c, nil
}

// comparedCatalog is the catalog as the full check's shape step found it
// before inspecting (catalogState), or why it could not be read.
type comparedCatalog struct {
	state certificate
	err   error
}

// readCompared reads the catalog the shape step is about to compare, where
// steps commit one by one (PostgreSQL): host DDL can land between the
// step's inspection and the certificate a step later, and a certificate is
// written only over the catalog read here. (SQLite's boot is one write
// transaction from the lock on: no other connection can commit DDL in it.)
func (r *run) readCompared(ctx context.Context, q core.Querier, decl *declare.Declaration) {
	if r.o.dialect == dialect.SQLite {
		return
	}
	c, err := r.catalogState(ctx, q, decl, false)
	r.compared = &comparedCatalog{state: c, err: err}
}

// fastPath records the steps of a certified boot — everything is as the last
// full check left it — and ends the session. The boot is one INFO line (its
// lock step's outcome); each step's own line is at DEBUG.
func (r *run) fastPath(ctx context.Context, sess core.Session, ks keys.Set, lock Step) {
	r.rep.EndState = EndState{ExecutionColumnNotNull: true, ThreeColumnUnique: true, TwoColumnUniqueAbsent: true, IndexesMatchDeclaration: true}
	r.rep.EndStateObserved = true
	r.rep.Keys, r.rep.KeysRead = ks, true
	r.rep.Certified = true
	r.reportDrift()
	r.o.logger.LogAttrs(ctx, slog.LevelInfo, "reconcile: the certificate holds; nothing to change",
		slog.String("lock", lock.Detail), slog.Duration("duration", lock.Duration))
	r.logStep(slog.LevelDebug, lock)
	r.keep(lock)
	for _, st := range bootSteps() {
		if st.certified != "" {
			s := Step{Name: st.name, Status: Unchanged, Detail: st.certified}
			r.logStep(slog.LevelDebug, s)
			r.keep(s)
		}
	}
	if err := sess.Close(ctx); err != nil {
		r.warn(StepLock, err)
	}
}
