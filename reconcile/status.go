package reconcile

import (
	"context"
	"database/sql"
	"fmt"

	"ariga.io/atlas/sql/schema"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/describe"
	"github.com/schemastate/schemastate/keys"
)

// Observation is a read-only look at an installation: what `schemastate
// status` prints and what CI compares between a fresh and a migrated store.
type Observation struct {
	Dialect dialect.Dialect `json:"dialect"`
	// Lock names the cross-replica lock a reconcile takes on this dialect
	// (Report.Lock).
	Lock string   `json:"lock"`
	Keys keys.Set `json:"keys"`
	// KeysRead is false when kandev_meta is missing: the keys were not read.
	KeysRead bool `json:"keys_read"`
	// State is the AC-24c classification.
	State    keys.State `json:"state"`
	EndState EndState   `json:"end_state"`
	// Indexes maps each owned table to its live index set (IndexSet form);
	// a table that does not exist is absent.
	Indexes map[string][]string `json:"indexes"`
	// HostTables names the host tables this module needs; MissingHostTables
	// those of them it cannot find.
	HostTables        []string `json:"host_tables"`
	MissingHostTables []string `json:"missing_host_tables"`
	// Drift lists the undeclared indexes, foreign keys and checks on the
	// owned tables, which a reconcile keeps (drift.go).
	Drift []Drift `json:"drift"`
	// Upgrade is set when an online PostgreSQL upgrade stopped between two
	// phases (a crash, a lock it could not get, a view blocking a widening).
	Upgrade *Upgrade `json:"upgrade,omitempty"`
}

// Upgrade describes an online upgrade in flight.
type Upgrade struct {
	// Found lists the artefacts the catalog holds, per table.
	Found []string `json:"found"`
	// Next is the ID of the phase the next reconcile runs first (Phase.ID);
	// Pending every phase it would run.
	Next    string   `json:"next"`
	Pending []string `json:"pending"`
}

// Observe inspects the declared tables and reads the keys. It takes no lock
// and changes nothing.
func Observe(ctx context.Context, db *sql.DB, opts ...Option) (*Observation, error) {
	o, drv, name, decl, err := readOnly(ctx, db, opts)
	if err != nil {
		return nil, err
	}
	obs := &Observation{Dialect: o.dialect, Lock: drv.LockMechanism(), HostTables: decl.HostTables()}
	if obs.MissingHostTables, err = missingTables(ctx, drv, db, decl.HostTables()); err != nil {
		return nil, err
	}
	if obs.MissingHostTables == nil {
		obs.MissingHostTables = []string{}
	}
	obs.Indexes = map[string][]string{}
	indexSets := func(live *schema.Schema) {
		for _, t := range live.Tables {
			obs.Indexes[t.Name] = describe.IndexSet(t)
		}
	}
	if obs.EndState, err = observeEndState(ctx, drv, db, decl, name, indexSets); err != nil {
		return nil, err
	}
	plain := *o
	plain.prune = false // drift is reported as kept: Observe plans what a plain boot would
	plan, err := planShape(ctx, drv, db, decl, name, &plain)
	if err != nil {
		return nil, err
	}
	if obs.Drift = plan.Drift(); obs.Drift == nil {
		obs.Drift = []Drift{}
	}
	if !contains(obs.MissingHostTables, keys.MetaTable) {
		if obs.Keys, err = keys.Read(ctx, db, o.dialect); err != nil {
			return nil, err
		}
		obs.KeysRead = true
	}
	obs.State = obs.Keys.State()
	if obs.Upgrade, err = upgradeInFlight(ctx, db, plan); err != nil {
		return nil, err
	}
	return obs, nil
}

// upgradeInFlight plans from the live catalog (read-only) and, when an online
// upgrade is in flight, names its artefacts and the phase it stopped before.
func upgradeInFlight(ctx context.Context, db *sql.DB, plan *ShapePlan) (*Upgrade, error) {
	found := plan.Resumed()
	if len(found) == 0 {
		return nil, nil
	}
	u := &Upgrade{Found: found, Pending: []string{}}
	for _, ph := range plan.Phases() {
		// A phase's check may read what an earlier phase adds: only the
		// phases before the first one not done are checked.
		if ph.DoneWhen != "" && u.Next == "" {
			var done bool
			if err := db.QueryRowContext(ctx, ph.DoneWhen).Scan(&done); err != nil {
				return nil, fmt.Errorf("%s: check whether done: %w", ph.ID(), err)
			}
			if done {
				continue
			}
		}
		if u.Next == "" {
			u.Next = ph.ID()
		}
		u.Pending = append(u.Pending, ph.ID())
	}
	return u, nil
}

func contains(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}
