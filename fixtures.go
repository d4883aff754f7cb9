// Package schemastate owns the durable record of every subagent an agent fans
// out to (task_session_subagents) and the declared shape that the reconciler
// keeps it in. The declared shape is schema.hcl, embedded here.
package schemastate

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"strings"
)

// SchemaHCL is the declared shape (schema.hcl), as built into this binary.
//
//go:embed schema.hcl
var SchemaHCL []byte

//go:embed testdata/host/*.sql testdata/legacy/*.sql testdata/demo/*.sql
var fixtures embed.FS

// HostFixture returns the minimal host tables (task_sessions,
// task_session_turns, task_session_messages, kandev_meta) for a dialect
// ("sqlite" or "postgres"). It exists for tests and demos: these tables belong
// to the host and are never created by a reconcile. The host declares the
// same DDL text on both dialects, and so does the fixture.
func HostFixture(dialect string) (string, error) {
	if err := known(dialect); err != nil {
		return "", err
	}
	return fixture("testdata/host/host.sql")
}

// LegacyFixture returns the pre-amendment task_session_subagents DDL
// (installed-base state 3), the same text on both dialects.
func LegacyFixture(dialect string) (string, error) {
	if err := known(dialect); err != nil {
		return "", err
	}
	return fixture("testdata/legacy/task_session_subagents.sql")
}

// HostAmendedFixture returns task_session_subagents as a host's own DDL
// creates it after the amendment (an inline three-column UNIQUE), with one
// row: installed-base state 6 reached without this module.
func HostAmendedFixture(dialect string) (string, error) {
	if err := known(dialect); err != nil {
		return "", err
	}
	return fixture("testdata/host/task_session_subagents_amended.sql")
}

// LifecycleLegacyFixture returns background_agent_log as the host deployed it
// before transcripts existed (no transcript_path, no transcript_status).
func LifecycleLegacyFixture(dialect string) (string, error) {
	if err := known(dialect); err != nil {
		return "", err
	}
	return fixture("testdata/host/background_agent_log_legacy.sql")
}

func known(dialect string) error {
	if dialect != "sqlite" && dialect != "postgres" {
		return fmt.Errorf("no fixture for dialect %q", dialect)
	}
	return nil
}

// DemoFixture returns a small pre-amendment store's rows (both dialects).
func DemoFixture() (string, error) { return fixture("testdata/demo/store.sql") }

// DemoSessionsFixture returns the host sessions the shipped frames
// (testdata/frames/) belong to (both dialects).
func DemoSessionsFixture() (string, error) { return fixture("testdata/demo/sessions.sql") }

func fixture(path string) (string, error) {
	b, err := fixtures.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("no fixture %s", path)
	}
	return string(b), nil
}

// SplitSQL splits a fixture script into statements: on ';' at the end of a
// line, dropping blank lines and '--' comment lines. Fixture scripts keep
// every ';' that ends a statement at a line end and none inside literals.
func SplitSQL(script string) []string {
	var out, cur []string
	for _, l := range strings.Split(script, "\n") {
		s := strings.TrimSpace(l)
		if s == "" || strings.HasPrefix(s, "--") {
			continue
		}
		cur = append(cur, l)
		if strings.HasSuffix(s, ";") {
			stmt := strings.TrimSuffix(strings.TrimSpace(strings.Join(cur, "\n")), ";")
			out = append(out, stmt)
			cur = nil
		}
	}
	if len(cur) > 0 {
		out = append(out, strings.TrimSpace(strings.Join(cur, "\n")))
	}
	return out
}

// ApplyScript runs a fixture script statement by statement, naming the
// statement that failed.
func ApplyScript(ctx context.Context, db *sql.DB, script string) error {
	for i, stmt := range SplitSQL(script) {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("fixture statement %d (%.60s…): %w", i+1, stmt, err)
		}
	}
	return nil
}
