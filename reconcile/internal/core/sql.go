package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"ariga.io/atlas/sql/schema"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/hooks"
	"github.com/schemastate/schemastate/internal/ops"
	"github.com/schemastate/schemastate/internal/readonly"
)

// ErrLockHeld is the cause of a failed lock step whose lock stayed taken for
// the whole lock wait (reconcile.ErrLockHeld, which is this value).
var ErrLockHeld = errors.New("another reconcile holds the lock")

// HeldError is a lock that another session holds: its message is the
// cause's, and it matches ErrLockHeld.
type HeldError struct{ Err error }

func (e HeldError) Error() string { return e.Err.Error() }

func (e HeldError) Unwrap() error { return e.Err }

// Is reports whether target is ErrLockHeld.
func (e HeldError) Is(target error) bool { return target == ErrLockHeld }

// QueryStrings returns the one text column of every row of query.
func QueryStrings(ctx context.Context, q Querier, query string, args ...any) ([]string, error) {
	return readonly.Strings(ctx, q, query, args...)
}

// Placeholders are n parameters of dialect d, numbered from from, joined
// for an IN list.
func Placeholders(d dialect.Dialect, from, n int) string {
	ps := make([]string, n)
	for i := range ps {
		ps[i] = d.Param(from + i)
	}
	return strings.Join(ps, ", ")
}

// RestoreSetting gives a connection setting back the value it had: restore
// runs, then read must read want (SQLite ignores a foreign_keys pragma inside
// a transaction, and says nothing). It runs whether or not the reconcile was
// canceled. A failure is logged at WARN, naming the setting by its read, and
// returned.
func RestoreSetting(q Querier, fail func(string) error, logger *slog.Logger, read, restore, want string) error {
	ctx := context.Background()
	err := fail(hooks.FailpointSettingRestore(read))
	if err == nil {
		_, err = q.ExecContext(ctx, restore)
	}
	if err == nil {
		var got string
		if err = q.QueryRowContext(ctx, read).Scan(&got); err == nil && got != want {
			err = fmt.Errorf("reads %s after %s", got, restore)
		}
	}
	if err != nil {
		err = fmt.Errorf("restore %s: %w", read, err)
		logger.Warn("connection setting not restored", "setting", read, "error", err)
	}
	return err
}

// DefaultSQL is a declared default as SQL.
func DefaultSQL(x schema.Expr) string {
	switch x := x.(type) {
	case *schema.Literal:
		return x.V
	case *schema.RawExpr:
		return x.X
	}
	return "NULL"
}

// SameColumns reports two indexes over the same columns, in order.
func SameColumns(a, b *schema.Index) bool {
	if len(a.Parts) != len(b.Parts) {
		return false
	}
	for i := range a.Parts {
		if a.Parts[i].C == nil || b.Parts[i].C == nil || a.Parts[i].C.Name != b.Parts[i].C.Name {
			return false
		}
	}
	return true
}

// Said is how a step's detail names the phase once it ran.
func Said(p ops.Phase) string {
	switch p.Name {
	case ops.PhaseCreate:
		return "created " + p.Table
	case ops.PhaseAlter:
		return "altered " + p.Table
	case ops.PhaseWiden:
		return "widened column types of " + p.Table
	case ops.PhaseRebuild:
		for _, g := range p.Guards {
			if g.Kind == ops.GuardForeignKeys {
				return "rebuilt " + p.Table
			}
		}
		return "rebuilt " + p.Table + " (foreign_key_check skipped: rows copied verbatim under the same foreign keys, none onto the table)"
	}
	return p.ID()
}

// FirstLine is a statement as an error names it.
func FirstLine(s string) string {
	if i := strings.IndexAny(s, "(\n"); i > 0 && i < 80 {
		return strings.TrimSpace(s[:i])
	}
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}
