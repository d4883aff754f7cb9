package pgsession

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/ops"
	"github.com/schemastate/schemastate/reconcile/internal/core"
)

// statement_timeout on PostgreSQL.
//
// Managed setups often give the application's role a statement_timeout of
// seconds. The reconcile's statements are not the application's: a
// concurrent build, a validation or the backfill's scan can take longer, and
// cancelled on every boot they never finish. So every transaction the
// reconcile opens sets its own statement_timeout (SET LOCAL, which ends with
// the transaction and so is never left on a pooled server connection), from
// a budget per kind of work (stmtBudgets, or WithStatementTimeout).
//
// A statement outside a transaction (CREATE or DROP INDEX CONCURRENTLY, the
// checks of a batched phase) has no SET LOCAL: it runs under the session's
// setting. Before a step's first phase, when one of its phases runs such a
// statement, the session's effective setting is read on the connection that
// will run it (preflight). A setting shorter than the work's budget is lifted
// on that connection when the connection reaches the server directly, and
// restored when the reconcile gives the connection back (discarded when the
// restore fails). Behind a pooler it cannot be lifted — a session SET would
// stay on a server connection another client is handed next — and the step
// is refused before it runs anything, naming the setting, where it comes
// from and the fix: a cause known in advance never leaves a half-applied
// shape (the column added, the key not built).

// stmtKind is a kind of work with a statement budget of its own.
type stmtKind int

const (
	// budgetCatalog: the lock's transaction, execution_since's, and a group
	// of statements phases (catalog changes under their lock; on a small
	// table the whole single-transaction change).
	budgetCatalog stmtKind = iota
	// budgetBatch: one batch of a batched copy or fill, of the rebuild's
	// copy, or one chunk of its replay.
	budgetBatch
	// budgetScan: work that grows with the table and has no batch: a
	// VALIDATE, an index build of the rebuild, its ANALYZE, a check_rows
	// read, the backfill's scan and copy (AC-23a: one statement).
	budgetScan
	// budgetConcurrent: a statement outside a transaction, CREATE or DROP
	// INDEX CONCURRENTLY above all: its lock waits are bounded by the
	// watcher (withConcurrentWait), the build itself runs as long as it
	// needs.
	budgetConcurrent
)

// stmtBudgets are the default statement_timeout of each kind (0: no
// bound), documented in docs/reconcile.md. A catalog change holds an
// exclusive lock and a batch is sized to a fraction of a second, so a
// minute and five are far past what either takes and still end a runaway;
// a scan takes what the table makes it take.
var stmtBudgets = [...]time.Duration{
	budgetCatalog:    time.Minute,
	budgetBatch:      5 * time.Minute,
	budgetScan:       0,
	budgetConcurrent: 0,
}

// stmtBudget is the statement_timeout the reconcile gives work of kind k:
// WithStatementTimeout's when set, else the kind's default.
func stmtBudget(o *core.Config, k stmtKind) time.Duration {
	if o.StmtTimeoutSet {
		return o.StmtTimeout
	}
	return stmtBudgets[k]
}

// setLocalTimeout sets statement_timeout for the rest of q's transaction.
func setLocalTimeout(ctx context.Context, q core.Querier, d time.Duration) error {
	_, err := q.ExecContext(ctx, fmt.Sprintf("SET LOCAL statement_timeout = %d", d.Milliseconds()))
	return err
}

// setLocalTimeouts sets lock_timeout and statement_timeout for the rest of
// q's transaction, in one round trip.
func setLocalTimeouts(ctx context.Context, q core.Querier, lock, stmt time.Duration) error {
	_, err := q.ExecContext(ctx, `SELECT set_config('lock_timeout', $1, true), set_config('statement_timeout', $2, true)`,
		fmt.Sprintf("%dms", max(lock.Milliseconds(), 1)), fmt.Sprintf("%dms", stmt.Milliseconds()))
	return err
}

// outsideTx reports a phase whose statements run outside a transaction,
// under the session's statement_timeout: CREATE or DROP INDEX
// CONCURRENTLY, and a batched phase's checks of every row.
func outsideTx(ph ops.Phase) bool {
	return ph.Kind == ops.KindConcurrent || ph.Kind == ops.KindBatched
}

// sessionTimeout is the statement_timeout a connection's statements run
// under outside a transaction, and where it was set.
type sessionTimeout struct {
	setting        time.Duration
	source         string // pg_settings.source
	role, database string // session_user, current_database()
}

func readSessionTimeout(ctx context.Context, conn *sql.Conn) (sessionTimeout, error) {
	var st sessionTimeout
	var ms int64
	err := conn.QueryRowContext(ctx, `SELECT setting::bigint, source, session_user, current_database()
 FROM pg_settings WHERE name = 'statement_timeout'`).Scan(&ms, &st.source, &st.role, &st.database)
	st.setting = time.Duration(ms) * time.Millisecond
	return st, err
}

// from names where the setting comes from, as an operator would change it.
func (st sessionTimeout) from() string {
	switch st.source {
	case "user":
		return "role " + st.role + " (ALTER ROLE … SET)"
	case "database":
		return "database " + st.database + " (ALTER DATABASE … SET)"
	case "database user":
		return "role " + st.role + " in database " + st.database + " (ALTER ROLE … IN DATABASE … SET)"
	case "client":
		return "the connection's startup options (the DSN's options or PGOPTIONS)"
	case "session":
		return "a SET on the connection the reconcile was given"
	case "configuration file":
		return "the server's configuration (postgresql.conf or ALTER SYSTEM)"
	}
	return "the server (source " + st.source + ")"
}

// fix says how the operator lets the reconcile's statements run.
func (st sessionTimeout) fix() string {
	switch st.source {
	case "client":
		return "drop statement_timeout from the connection's options for the reconcile's pool"
	case "session":
		return "do not SET statement_timeout on the connections the reconcile is given"
	}
	return fmt.Sprintf("ALTER ROLE %s IN DATABASE %s SET statement_timeout = 0 (for this role in this database only)",
		dialect.QuoteIdent(st.role), dialect.QuoteIdent(st.database))
}

// preflight runs before a step's first phase. When a phase of the step
// runs statements outside a transaction and the session's statement_timeout
// is shorter than their budget, it lifts the setting on the steps'
// connection (a direct one), or refuses the step with ErrStatementTimeout
// before anything ran (behind a pooler). A lifted setting is restored by
// release.
func (s *Session) Preflight(ctx context.Context, phases []ops.Phase) error {
	if s.restoreTimeout != "" {
		return nil // lifted already, for an earlier step
	}
	outside, err := s.outsidePhases(ctx, phases)
	if err != nil || len(outside) == 0 {
		return err
	}
	st, err := readSessionTimeout(ctx, s.conn)
	if err != nil {
		return fmt.Errorf("read the session's statement_timeout: %w", err)
	}
	need := stmtBudget(s.o, budgetConcurrent)
	if st.setting == 0 || need > 0 && st.setting >= need {
		return nil
	}
	direct, err := s.direct(ctx)
	if err != nil {
		return fmt.Errorf("tell whether the connection is direct: %w", err)
	}
	if !direct {
		budget := "none"
		if need > 0 {
			budget = need.String()
		}
		return fmt.Errorf("%w: it is %s, set by %s; %s run outside a transaction, where no SET LOCAL reaches, and their budget is %s; the connection goes through a pooler, where a session SET would stay on a server connection another client is handed next, so the reconcile cannot lift the setting and ran nothing: %s, or reconcile over a direct connection (the setting is then lifted on the reconcile's own connection and restored), or WithStatementTimeout(%s) to take the setting as the bound",
			ops.ErrStatementTimeout, st.setting, st.from(), strings.Join(outside, ", "), budget, st.fix(), st.setting)
	}
	restore := "RESET statement_timeout"
	if st.source == "session" {
		restore = fmt.Sprintf("SET statement_timeout = %d", st.setting.Milliseconds())
	}
	if _, err := s.conn.ExecContext(ctx, fmt.Sprintf("SET statement_timeout = %d", need.Milliseconds())); err != nil {
		return fmt.Errorf("lift statement_timeout (%s, set by %s) on the reconcile's connection: %w", st.setting, st.from(), err)
	}
	s.restoreTimeout = restore
	s.o.Logger.Info("reconcile: statement_timeout lifted on the reconcile's own connection for statements outside a transaction; restored when it is given back",
		"statement_timeout", st.setting.String(), "set_by", st.from(), "phases", outside)
	return nil
}

// outsidePhases names the phases that will run statements outside a
// transaction: every one outsideTx reports but a concurrent phase the
// catalog says is done (a boot resumed past it runs nothing of it; its
// DoneWhen reads the catalog alone, where a batched phase's scans the
// table, under the very setting in question).
func (s *Session) outsidePhases(ctx context.Context, phases []ops.Phase) ([]string, error) {
	var outside []string
	for _, ph := range phases {
		if !outsideTx(ph) {
			continue
		}
		if ph.Kind == ops.KindConcurrent && ph.DoneWhen != "" {
			var done bool
			if err := s.conn.QueryRowContext(ctx, ph.DoneWhen).Scan(&done); err != nil {
				return nil, fmt.Errorf("%s: check whether done: %w", ph.ID(), err)
			}
			if done {
				continue
			}
		}
		outside = append(outside, ph.ID())
	}
	return outside, nil
}

// direct reports whether the steps' connection reaches the server without
// a pooler between: the backend the server named when the connection
// started (pgx's BackendKeyData) is the one running its statements. A
// pooler answers the startup itself, with a cancel key of its own, and
// hands the client's statements to server connections of its choosing. A
// driver other than pgx cannot tell, and is taken as pooled.
func (s *Session) direct(ctx context.Context) (bool, error) {
	var started uint32
	err := s.conn.Raw(func(dc any) error {
		// pgx's stdlib connection, seen through its method rather than its
		// type: importing pgx/v5/stdlib would register the "pgx" driver
		// in the host's process (TestImport_NoDatabaseDriverRegistered).
		if c, ok := dc.(interface{ Conn() *pgx.Conn }); ok {
			started = c.Conn().PgConn().PID()
		}
		return nil
	})
	if err != nil || started == 0 {
		return false, err
	}
	var pid int64
	if err := s.conn.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		return false, err
	}
	return pid == int64(started), nil
}

// restoreSession gives the steps' connection back the statement_timeout
// preflight lifted; a connection whose restore fails is discarded, never
// returned to the host's pool with the reconcile's setting.
func (s *Session) restoreSession() {
	if s.restoreTimeout == "" || s.conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := s.conn.ExecContext(ctx, s.restoreTimeout)
	s.restoreTimeout = ""
	if err != nil && !errors.Is(err, sql.ErrConnDone) {
		s.o.Logger.Warn("reconcile: could not restore statement_timeout on its connection; the connection is discarded", "error", err)
	}
	if err != nil {
		discard(s.conn)
		s.conn = nil
	}
}
