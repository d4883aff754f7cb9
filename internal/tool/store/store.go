// Package store creates the empty databases that parity, lint, the benchmark
// and the tests build installed-base states in: a SQLite file or a
// PostgreSQL schema, either temporary (a Scratch, every store removed on
// Close) or at one location the caller names, emptied for each next store (a
// Slot). It never empties a location that held tables before it filled it.
package store

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/perdialect"
	"github.com/schemastate/schemastate/internal/tool/dsn"

	_ "github.com/schemastate/schemastate/drivers"
)

// Store is one empty database, open.
type Store struct {
	*sql.DB
	Dialect dialect.Dialect
	// DSN opens another pool (or a child process) onto the same store: a
	// modernc file DSN, or a PostgreSQL URL whose search_path is the
	// store's schema.
	DSN string
	// CLIDSN is the form the schemastate CLI's --db takes.
	CLIDSN string
	// Schema is the PostgreSQL schema, "main" on SQLite.
	Schema string
}

// location is where one store lives, before it is opened.
type location struct {
	// target opens it (errors that never repeat a password).
	target         dsn.Target
	cliDSN, schema string
}

func (l location) open(ctx context.Context) (*Store, error) {
	// On SQLite the ping creates the file: the store exists once open returns.
	db, err := l.target.Open(ctx)
	if err != nil {
		return nil, err
	}
	return &Store{DB: db, Dialect: l.target.Dialect, DSN: l.target.DSN, CLIDSN: l.cliDSN, Schema: l.schema}, nil
}

// area is one dialect's place for temporary stores: a directory, or a
// server's schemas.
type area interface {
	dialect() dialect.Dialect
	// create makes an empty store called name (a file or schema name).
	create(ctx context.Context, name string) (location, error)
	// remove deletes every store create made, bounded in time.
	remove() error
}

// Scratch creates temporary empty stores and removes them all on Close.
type Scratch struct {
	area   area
	prefix string
	names  map[string]bool
	stores []*Store
}

// NewScratch prepares temporary stores on server, a PostgreSQL URL (each
// store a schema there), or, when server is empty, in a temporary directory
// (each store a SQLite file). purpose ("parity", "lint", "test") names the
// directory and the schemas, so a leftover says what left it.
func NewScratch(ctx context.Context, server, purpose string) (*Scratch, error) {
	var b [6]byte
	_, _ = rand.Read(b[:])
	prefix := "schemastate_" + purpose + "_" + hex.EncodeToString(b[:])
	a, err := newArea(ctx, server, prefix)
	if err != nil {
		return nil, err
	}
	return &Scratch{area: a, prefix: prefix, names: map[string]bool{}}, nil
}

// newArea is the SQLite directory when server is empty, else the server's
// area for its dialect; a server of any other dialect is an error.
func newArea(ctx context.Context, server, prefix string) (area, error) {
	if server == "" {
		return newSQLiteArea(prefix)
	}
	t, err := dsn.Parse(server)
	if err != nil {
		return nil, err
	}
	newServerArea, err := serverAreas.For(t.Dialect)
	if err != nil || newServerArea == nil {
		return nil, fmt.Errorf("store: a scratch server must be PostgreSQL, not %s", t.Display)
	}
	return newServerArea(ctx, t, prefix)
}

// serverAreas are the dialects whose stores live on a server (nil: not on
// a server).
var serverAreas = perdialect.Of[func(context.Context, dsn.Target, string) (area, error)]{Postgres: newPostgresArea}

// Dialect is the dialect of the stores.
func (sc *Scratch) Dialect() dialect.Dialect { return sc.area.dialect() }

// Open creates an empty store called name and opens it; Close closes and
// removes it. A name is used once per Scratch: a second store of the same
// name would not be empty.
func (sc *Scratch) Open(ctx context.Context, name string) (*Store, error) {
	if sc.names[name] {
		return nil, fmt.Errorf("store: a store called %q was already created here", name)
	}
	loc, err := sc.area.create(ctx, sc.prefix+"_"+identifier(name))
	if err != nil {
		return nil, err
	}
	sc.names[name] = true
	st, err := loc.open(ctx)
	if err != nil {
		return nil, err
	}
	sc.stores = append(sc.stores, st)
	return st, nil
}

// identifier is name as a file and schema name: lower case, anything but a
// letter or digit an underscore.
func identifier(name string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, strings.ToLower(name))
}

// Close removes every store, also when the context that made them was
// cancelled: the removal runs on a context of its own, bounded.
func (sc *Scratch) Close() error {
	for _, st := range sc.stores {
		st.Close()
	}
	return sc.area.remove()
}

// Slot hands out empty stores one at a time, always at the location a
// --db target names: a SQLite file deleted and created again, or the
// PostgreSQL schema the URL's search_path names (or its current schema),
// whose tables are dropped for the next store.
type Slot struct {
	d        dialect.Dialect
	err      error
	place    place
	notEmpty error
	st       *Store
	filled   bool
}

// place is one dialect's way of emptying the location a slot names.
type place interface {
	// dir is a directory on the disk the store lives on ("" when not
	// reachable from here).
	dir() string
	location() location
	// holds says what an open store holds ("" when it is empty): a
	// location that held anything before the slot's first store is never
	// emptied.
	holds(ctx context.Context, db *sql.DB) (string, error)
	// empty removes everything the previous store (st, open) holds and
	// returns the store to hand out next, or nil to open the location again.
	empty(ctx context.Context, st *Store) (*Store, error)
}

// places are the dialects a Slot can hold.
var places = perdialect.Of[func(dsn.Target) place]{Postgres: newPostgresPlace, SQLite: newSQLitePlace}

// NewSlot is a slot at t. Its first store is refused, with an error wrapping
// notEmpty, when the location already holds tables. A target of a dialect
// with no stores makes every Next fail.
func NewSlot(t dsn.Target, notEmpty error) *Slot {
	newPlace, err := places.For(t.Dialect)
	if err != nil {
		return &Slot{d: t.Dialect, err: fmt.Errorf("store: no stores for dialect %q", t.Dialect)}
	}
	return &Slot{d: t.Dialect, place: newPlace(t), notEmpty: notEmpty}
}

// Dialect is the dialect of the stores.
func (s *Slot) Dialect() dialect.Dialect { return s.d }

// Dir is a directory on the disk the stores live on, for a disk-rate probe
// ("" when that disk is not reachable from here).
func (s *Slot) Dir() string {
	if s.err != nil {
		return ""
	}
	return s.place.dir()
}

// Next returns an empty store, replacing the previous one.
func (s *Slot) Next(ctx context.Context) (*Store, error) {
	if s.err != nil {
		return nil, s.err
	}
	if s.st != nil {
		st, err := s.place.empty(ctx, s.st)
		s.st = st
		if err != nil {
			return nil, err
		}
	}
	if s.st == nil {
		st, err := s.place.location().open(ctx)
		if err != nil {
			return nil, err
		}
		s.st = st
	}
	if !s.filled {
		what, err := s.place.holds(ctx, s.st.DB)
		if err != nil {
			return nil, err
		}
		if what != "" {
			s.st.Close()
			s.st = nil
			return nil, fmt.Errorf("%w: %s", s.notEmpty, what)
		}
		s.filled = true
	}
	return s.st, nil
}

// Close closes the open store; what it holds stays.
func (s *Slot) Close() error {
	if s.st != nil {
		return s.st.Close()
	}
	return nil
}
