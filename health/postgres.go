package health

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/schemastate/schemastate/internal/jsonfield"
	"github.com/schemastate/schemastate/internal/readonly"
)

// PostgreSQL 15 has neither IS JSON nor pg_input_is_valid, a cast of
// malformed text to jsonb raises and aborts the statement, and a replica (or
// a read-only role) cannot create the function that would trap it. So the
// evaluation casts every candidate (postgresEvalCTE) and, only when that
// raises, finds the documents the parser refuses by asking it about subsets
// of the candidates, each in a savepoint, and evaluates again without them.
// Savepoints are allowed in a read-only transaction and on a hot standby; the
// REPEATABLE READ snapshot is the transaction's, so every statement reads the
// same rows (AC-28b).

const pgSavepoint = "schemastate_health"

// evaluatePostgres runs evaluation q on tx (REPEATABLE READ READ ONLY) and
// scans its one row into c.
func evaluatePostgres(ctx context.Context, tx *sql.Tx, q, since string, c *counts) error {
	err := inSavepoint(ctx, tx, func() error { return c.scan(tx.QueryRowContext(ctx, q, since, []string{}, []string{})) })
	if !unparseable(err) {
		return err
	}
	ids, err := readonly.Strings(ctx, tx, pgCandidates("m.id"), since)
	if err != nil {
		return fmt.Errorf("candidate messages: %w", err)
	}
	bad, err := postgresUnparseable(ctx, tx, ids)
	if err != nil {
		return err
	}
	excluded, readable, err := postgresReadable(ctx, tx, bad)
	if err != nil {
		return err
	}
	return c.scan(tx.QueryRowContext(ctx, q, since, excluded, readable))
}

// postgresReadable splits the ids jsonb refused into those refused only for
// a \u0000 or lone-surrogate escape — their documents parse once each string
// holding one reads as null (jsonfield.PostgresReadable), as the backfill
// reads them — and the rest, which read as no document.
func postgresReadable(ctx context.Context, tx *sql.Tx, bad []string) (excluded, readable []string, err error) {
	if len(bad) == 0 {
		return nil, nil, nil
	}
	maybe, err := readonly.Strings(ctx, tx, `SELECT m.id FROM task_session_messages m WHERE m.id = ANY($1) AND `+
		jsonfield.PostgresMayHoldUnstorable("m.metadata::text"), bad)
	if err != nil {
		return nil, nil, fmt.Errorf("candidate messages: %w", err)
	}
	escaped := map[string]bool{}
	for _, id := range maybe {
		escaped[id] = true
	}
	still, err := unparseableAs(ctx, tx, maybe, jsonfield.PostgresReadable("c.doc"))
	if err != nil {
		return nil, nil, err
	}
	refused := map[string]bool{}
	for _, id := range still {
		refused[id] = true
	}
	for _, id := range bad {
		if escaped[id] && !refused[id] {
			readable = append(readable, id)
		} else {
			excluded = append(excluded, id)
		}
	}
	return excluded, readable, nil
}

// postgresUnparseable returns the ids among ids whose metadata PostgreSQL's
// jsonb parser refuses: a subset that casts cleanly holds none; one that
// does not is halved until the refused documents are isolated. The cost is a
// few statements per malformed candidate, and nothing when there is none.
func postgresUnparseable(ctx context.Context, tx *sql.Tx, ids []string) ([]string, error) {
	return unparseableAs(ctx, tx, ids, "c.doc")
}

// unparseableAs is postgresUnparseable for the documents as doc renders them
// (an SQL expression over c.doc, the metadata as text).
func unparseableAs(ctx context.Context, tx *sql.Tx, ids []string, doc string) ([]string, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	// MATERIALIZED: the cast runs on the listed rows only, never on a row the
	// planner reads before filtering.
	probe := `WITH c AS MATERIALIZED (SELECT m.metadata::text AS doc FROM task_session_messages m WHERE m.id = ANY($1))
SELECT COUNT(CAST(` + doc + ` AS jsonb)) FROM c`
	err := inSavepoint(ctx, tx, func() error {
		var n int64
		return tx.QueryRowContext(ctx, probe, ids).Scan(&n)
	})
	switch {
	case err == nil:
		return nil, nil
	case !unparseable(err):
		return nil, fmt.Errorf("metadata of candidate messages: %w", err)
	case len(ids) == 1:
		return ids, nil
	}
	half := len(ids) / 2
	a, err := unparseableAs(ctx, tx, ids[:half], doc)
	if err != nil {
		return nil, err
	}
	b, err := unparseableAs(ctx, tx, ids[half:], doc)
	if err != nil {
		return nil, err
	}
	return append(a, b...), nil
}

// inSavepoint runs fn inside a savepoint of tx, rolled back to when fn fails
// so the transaction (and its snapshot) stays usable; fn's error is returned.
func inSavepoint(ctx context.Context, tx *sql.Tx, fn func() error) error {
	if _, err := tx.ExecContext(ctx, "SAVEPOINT "+pgSavepoint); err != nil {
		return fmt.Errorf("savepoint: %w", err)
	}
	if err := fn(); err != nil {
		if _, rerr := tx.ExecContext(ctx, "ROLLBACK TO SAVEPOINT "+pgSavepoint); rerr != nil {
			return errors.Join(err, fmt.Errorf("rollback to savepoint: %w", rerr))
		}
		return err
	}
	if _, err := tx.ExecContext(ctx, "RELEASE SAVEPOINT "+pgSavepoint); err != nil {
		return fmt.Errorf("release savepoint: %w", err)
	}
	return nil
}

// unparseable reports whether err is the jsonb parser refusing a document:
// the error classes the backfill's guarded cast traps (data_exception, and
// statement_too_complex for nesting that exhausts the parser's stack), so
// the health check and the backfill refuse exactly the same documents.
func unparseable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (strings.HasPrefix(pe.Code, "22") || pe.Code == "54001")
}
