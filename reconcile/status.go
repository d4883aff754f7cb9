package reconcile

import (
	"context"
	"database/sql"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/keys"
)

// Observation is a read-only look at an installation: what `schemastate
// status` prints and what CI compares between a fresh and a migrated store.
type Observation struct {
	Dialect dialect.Dialect `json:"dialect"`
	Keys    keys.Set        `json:"keys"`
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
}

// Observe inspects the declared tables and reads the keys. It takes no lock
// and changes nothing.
func Observe(ctx context.Context, db *sql.DB, opts ...Option) (*Observation, error) {
	o, name, decl, err := readOnly(ctx, db, opts)
	if err != nil {
		return nil, err
	}
	obs := &Observation{Dialect: o.dialect, Indexes: map[string][]string{}, HostTables: decl.HostTables()}
	if obs.MissingHostTables, err = missingTables(ctx, o.dialect, db, decl.HostTables()); err != nil {
		return nil, err
	}
	if obs.MissingHostTables == nil {
		obs.MissingHostTables = []string{}
	}
	drv, err := atlasDriver(o.dialect, db)
	if err != nil {
		return nil, err
	}
	live, err := inspect(ctx, drv, decl, name)
	if err != nil {
		return nil, err
	}
	for _, t := range live.Tables {
		obs.Indexes[t.Name] = IndexSet(t)
	}
	lt, _ := live.Table(subagentsTable)
	if err := dropDeferrableUniques(ctx, o.dialect, db, lt); err != nil {
		return nil, err
	}
	obs.EndState = observe(lt, decl.Table(subagentsTable))
	plan, err := planShape(ctx, drv, o.dialect, db, decl, name, false)
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
	return obs, nil
}

func contains(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}
