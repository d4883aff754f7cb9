// Package gen writes a host-shaped store with the reference store's
// subagent distribution (host-context.md, "Reference-store shape") at any
// size, in one of the installed-base states a reconcile has to meet. It exists
// for benchmarks, demos and tests; the host never runs it.
//
// Everything is derived from one seed (math/rand/v2, PCG), so two
// generations with the same Config write identical rows. Rows are streamed
// in bounded transactions of multi-row prepared INSERTs: memory stays flat
// however large the store.
package gen

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/declare"
	"github.com/schemastate/schemastate/internal/instant"
	"github.com/schemastate/schemastate/internal/perdialect"
	"github.com/schemastate/schemastate/internal/readonly"
	"github.com/schemastate/schemastate/internal/tool/basestate"
	"github.com/schemastate/schemastate/keys"
	"github.com/schemastate/schemastate/reconcile"
)

// The installed-base states the generator writes, named by the word
// generate's --state takes for each.
var (
	// Predating: host history only; no task_session_subagents, no keys
	// (installed-base state 2).
	Predating = basestate.Predating
	// Legacy: the pre-amendment table (no agent_execution_id, two-column
	// UNIQUE) holding backfill rows for invocations before the activation
	// instant and live rows after it, and the two second-precision keys the
	// pre-amendment build wrote (states 3 and 4).
	Legacy = basestate.PreAmendment
	// Amended: the history before the activation instant is written, a
	// reconcile brings the table to its declared shape and backfills it, and
	// the rest of the history arrives after activation with live rows
	// carrying real UUID execution ids (state 6, the steady state).
	Amended = basestate.Amended
)

// States lists every state the generator writes, in the order a store
// passes through them.
var States = []*basestate.State{Predating, Legacy, Amended}

// Lookup is the state of States that word (generate's --state) names.
func Lookup(word string) (*basestate.State, bool) {
	s, ok := basestate.ByFlag(word)
	if !ok || !slices.Contains(States, s) {
		return nil, false
	}
	return s, true
}

// ErrNotEmpty is returned when the target already holds history or a
// task_session_subagents table: the generator only writes into an empty store.
var ErrNotEmpty = errors.New("gen: the database already holds a store")

// Config is one generation.
type Config struct {
	// ScaleMB is the approximate store size in MiB (default ReferenceMB).
	ScaleMB float64
	// Population multiplies the reference subagent population. Zero means
	// ScaleMB/ReferenceMB: everything scales together. Set it to write the
	// full distribution into a small store (tests).
	Population float64
	// State is one of States (default Predating).
	State *basestate.State
	Seed  uint64
	// Progress, when set, is called after every committed transaction.
	Progress func(Progress)
	// Logger receives the amended state's reconcile log (default: discarded).
	Logger *slog.Logger
}

// Progress is reported while a generation runs.
type Progress struct {
	Messages       int           `json:"messages"`
	PlannedMessage int           `json:"planned_messages"`
	Bytes          int64         `json:"bytes"`
	TargetBytes    int64         `json:"target_bytes"`
	Elapsed        time.Duration `json:"-"`
}

// Summary is what one generation wrote.
type Summary struct {
	Dialect dialect.Dialect `json:"dialect"`
	// State is the state's --state word.
	State      string     `json:"state"`
	Seed       uint64     `json:"seed"`
	ScaleMB    float64    `json:"scale_mb"`
	Population Population `json:"population"`
	Sessions   int        `json:"sessions"`
	Turns      int        `json:"turns"`
	Messages   int        `json:"messages"`
	// SubagentMessages is the number of messages describing an invocation.
	SubagentMessages int `json:"subagent_messages"`
	// ContentBytes is the bytes of message content and metadata written.
	ContentBytes int64 `json:"content_bytes"`
	// StoreBytes is the store's size afterwards: the SQLite file's pages, or
	// the PostgreSQL tables of the schema with their indexes and TOAST.
	StoreBytes int64 `json:"store_bytes"`
	// LiveRows and BackfillRows are the task_session_subagents rows the
	// generator wrote itself (legacy, amended); the amended state's reconcile
	// adds the backfilled ones, counted in BackfillRows.
	LiveRows     int      `json:"live_rows"`
	BackfillRows int64    `json:"backfill_rows"`
	Keys         keys.Set `json:"keys"`
	// ActivatedAt is the activation instant (legacy, amended).
	ActivatedAt string        `json:"activated_at,omitempty"`
	Duration    time.Duration `json:"duration_ns"`
}

// Generate writes a store into db, which must be empty of history.
func Generate(ctx context.Context, db *sql.DB, cfg Config) (*Summary, error) {
	start := time.Now()
	if cfg.ScaleMB <= 0 {
		cfg.ScaleMB = ReferenceMB
	}
	if cfg.Population <= 0 {
		cfg.Population = cfg.ScaleMB / ReferenceMB
	}
	if cfg.State == nil {
		cfg.State = Predating
	}
	if !slices.Contains(States, cfg.State) {
		return nil, fmt.Errorf("gen: the generator does not write the %s state (want predating, legacy or amended)", cfg.State)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	d, err := dialect.Detect(db)
	if err != nil {
		return nil, err
	}
	st := stores.Must(d) // Detect returns only the two dialects
	if err := requireEmpty(ctx, db, d); err != nil {
		return nil, err
	}
	if err := cfg.State.SeedTables(ctx, db, d); err != nil {
		return nil, fmt.Errorf("gen: %w", err)
	}

	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	restore, err := st.tune(ctx, conn)
	if err != nil {
		return nil, err
	}
	defer restore()

	g := &generator{cfg: cfg, d: d, db: db, start: start,
		rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15))}
	g.sum = &Summary{Dialect: d, State: cfg.State.Flag, Seed: cfg.Seed, ScaleMB: cfg.ScaleMB}
	if err := g.run(ctx, conn); err != nil {
		return nil, err
	}
	if _, err := conn.ExecContext(ctx, st.finish); err != nil {
		return nil, err
	}
	if g.sum.StoreBytes, err = StoreBytes(ctx, conn, d); err != nil {
		return nil, err
	}
	if g.sum.Keys, err = keys.Read(ctx, db, d); err != nil {
		return nil, err
	}
	g.sum.Duration = time.Since(start)
	return g.sum, nil
}

func requireEmpty(ctx context.Context, db *sql.DB, d dialect.Dialect) error {
	for _, t := range []string{"task_session_subagents", "task_session_messages"} {
		exists, err := readonly.TableExists(ctx, db, d, t)
		if err != nil {
			return err
		}
		if !exists {
			continue
		}
		if t == "task_session_subagents" {
			return fmt.Errorf("%w: task_session_subagents exists", ErrNotEmpty)
		}
		var any bool
		if err := db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM task_session_messages)`).Scan(&any); err != nil {
			return err
		}
		if any {
			return fmt.Errorf("%w: task_session_messages has rows", ErrNotEmpty)
		}
	}
	return nil
}

// storeSQL is how a dialect's store is set up for bulk writing and
// measured (gen_<dialect>.go).
type storeSQL struct {
	// tune sets the connection up for bulk writing and returns what undoes
	// it.
	tune func(ctx context.Context, conn *sql.Conn) (func(), error)
	// finish leaves the store as a running host would.
	finish string
	// bytes selects the size of the store.
	bytes string
}

var stores = perdialect.Of[storeSQL]{Postgres: postgresStore, SQLite: sqliteStore}

// StoreBytes is the size of the store behind q: the SQLite database's pages,
// or every table of the current PostgreSQL schema with indexes and TOAST.
func StoreBytes(ctx context.Context, q dialect.Querier, d dialect.Dialect) (int64, error) {
	st, err := stores.For(d)
	if err != nil {
		return 0, fmt.Errorf("gen: %w", err)
	}
	var n int64
	err = q.QueryRowContext(ctx, st.bytes).Scan(&n)
	return n, err
}

// generator carries one generation's state while it streams.
type generator struct {
	cfg   Config
	d     dialect.Dialect
	db    *sql.DB
	rng   *rand.Rand
	start time.Time
	sum   *Summary
	plan  *plan
	text  corpus
	w     *writer

	turns, messages, subagentRows *table
	// rebase moves post-activation timestamps of the amended state to just
	// after the activation its reconcile sampled; zero elsewhere.
	rebase    time.Duration
	activated bool
	// lastBefore is the newest subagent message before the activation
	// instant (legacy: backfill_through).
	lastBefore time.Time
}

func (g *generator) run(ctx context.Context, conn *sql.Conn) error {
	g.text = newCorpus(g.rng)
	pop := Expected(g.cfg.Population)
	target := int64(g.cfg.ScaleMB * (1 << 20))
	g.plan = newPlan(g.rng, pop, target, meanMessageBytes(g.cfg.Seed))
	g.sum.Population = pop

	g.w = &writer{ctx: ctx, conn: conn, d: g.d}
	g.turns = g.w.table("task_session_turns", "id", "task_session_id", "task_id", "started_at", "completed_at", "metadata", "created_at", "updated_at")
	g.messages = g.w.table("task_session_messages", "id", "task_session_id", "task_id", "turn_id", "author_type", "author_id", "content", "requests_input", "type", "metadata", "created_at", "updated_at")
	// The table's columns as the state has it: the declared ones once
	// amended, the pre-amendment ones before.
	cols, err := declare.PreAmendmentColumns()
	if g.cfg.State == Amended {
		cols, err = declare.Columns(declare.Subagents)
	}
	if err != nil {
		return fmt.Errorf("gen: %w", err)
	}
	g.subagentRows = g.w.table(declare.Subagents, cols...)
	g.w.onCommit = func() {
		if g.cfg.Progress != nil {
			g.cfg.Progress(Progress{Messages: g.sum.Messages, PlannedMessage: g.plan.messages, Bytes: g.sum.ContentBytes + int64(g.sum.Messages)*overheadPerMessage, TargetBytes: target, Elapsed: time.Since(g.start)})
		}
	}
	if err := g.w.begin(); err != nil {
		return err
	}
	if err := g.stream(ctx); err != nil {
		g.w.rollback()
		return err
	}
	if err := g.w.commit(false); err != nil {
		g.w.rollback()
		return err
	}
	if g.cfg.State == Legacy {
		return g.legacyKeys(ctx)
	}
	if g.cfg.State == Amended && !g.activated {
		// Every session predates activation: activate at the end.
		return g.activate(ctx)
	}
	return nil
}

func (g *generator) stream(ctx context.Context) error {
	activation := g.plan.activation()
	for si, sp := range g.plan.sessions {
		start := g.plan.sessionStart(si)
		live := g.cfg.State != Predating && !start.Before(activation)
		if live && g.cfg.State == Amended && !g.activated {
			if err := g.w.commit(false); err != nil {
				return err
			}
			if err := g.activate(ctx); err != nil {
				return err
			}
			if err := g.w.begin(); err != nil {
				return err
			}
		}
		if err := g.session(si, sp, start.Add(g.rebase)); err != nil {
			return err
		}
		if err := g.w.maybeCommit(); err != nil {
			return err
		}
	}
	return nil
}

// activate is the amended state's boot of the amended build: a reconcile on
// the history written so far (table created, execution_since written, the
// guarded backfill run). Later sessions are moved to just after the
// capture_since it sampled, so their live rows are what a live writer on an
// activated installation produces.
func (g *generator) activate(ctx context.Context) error {
	rep, err := reconcile.Reconcile(ctx, g.db, reconcile.WithLogger(g.cfg.Logger))
	if err != nil {
		return fmt.Errorf("gen: amended state: %w", err)
	}
	if s := rep.Step(reconcile.StepBackfill); s != nil && s.Rows != nil {
		g.sum.BackfillRows = *s.Rows
	}
	if rep.Keys.CaptureSince == nil {
		return errors.New("gen: amended state: reconcile wrote no capture_since")
	}
	at, err := instant.Parse(*rep.Keys.CaptureSince)
	if err != nil {
		return err
	}
	g.rebase = at.Add(time.Millisecond).Sub(g.plan.activation()).Truncate(time.Microsecond)
	g.activated = true
	g.sum.ActivatedAt = *rep.Keys.CaptureSince
	return nil
}

// legacyKeys writes the two keys as the pre-amendment build did: second
// precision, capture_since at the activation instant and backfill_through
// at the newest subagent message before it.
func (g *generator) legacyKeys(ctx context.Context) error {
	act := g.plan.activation()
	through := ""
	if !g.lastBefore.IsZero() {
		through = g.lastBefore.UTC().Truncate(time.Second).Format(time.RFC3339)
	}
	g.sum.ActivatedAt = act.Truncate(time.Second).Format(time.RFC3339)
	for _, kv := range [][2]string{{keys.CaptureSince, g.sum.ActivatedAt}, {keys.BackfillThrough, through}} {
		if _, err := keys.WriteOnce(ctx, g.db, g.d, kv[0], kv[1]); err != nil {
			return err
		}
	}
	return nil
}
