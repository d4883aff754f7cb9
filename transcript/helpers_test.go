package transcript_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/reconcile"
	"github.com/schemastate/schemastate/transcript"
)

var ctx = context.Background()

func newStore(t *testing.T, opts ...transcript.Option) *transcript.Store {
	t.Helper()
	s, err := transcript.NewStore(filepath.Join(t.TempDir(), "conversation"), opts...)
	require.NoError(t, err)
	return s
}

// created is a new store holding one created transcript, of header(session,
// agent, kind).
func created(t *testing.T, session, agent string, kind transcript.Kind) (*transcript.Store, transcript.Header) {
	t.Helper()
	s := newStore(t)
	h := header(session, agent, kind)
	require.NoError(t, s.Create(ctx, h))
	return s, h
}

func header(session, agent string, kind transcript.Kind) transcript.Header {
	return transcript.Header{ParentSessionID: session, AgentID: agent, ExecutionID: "exec-" + agent,
		Kind: kind, Provider: "anthropic", Model: "claude-sonnet-4-5",
		StartedAt: time.Date(2026, 8, 21, 9, 30, 0, 123456789, time.UTC)}
}

func msg(typ transcript.EventType, text string) transcript.Event {
	return transcript.Event{Type: typ, Text: text}
}

func call(id, name, input string) transcript.Event {
	return transcript.Event{Type: transcript.ToolCall, Call: &transcript.Call{ID: id, Name: name, Input: json.RawMessage(input)}}
}

func result(id, output string, isErr bool, errText string) transcript.Event {
	return transcript.Event{Type: transcript.ToolResult, Result: &transcript.Result{CallID: id, Output: output, IsError: isErr, Error: errText}}
}

// readDoc reads a finished transcript the way an operator would: the .json
// file, with nothing but encoding/json.
func readDoc(t *testing.T, s *transcript.Store, session, agent string) map[string]any {
	t.Helper()
	p, err := s.PathsFor(session, agent)
	require.NoError(t, err)
	b, err := os.ReadFile(p.Transcript)
	require.NoError(t, err)
	var doc map[string]any
	require.NoError(t, json.Unmarshal(b, &doc))
	return doc
}

func texts(tr *transcript.Transcript) []string {
	var out []string
	for _, e := range tr.Events {
		out = append(out, e.Text)
	}
	return out
}

// lifecycleDB gives db the host tables and the declared shape, so
// background_agent_log exists as schema.hcl declares it.
func lifecycleDB(t *testing.T, db *dbtest.DB) *transcript.Lifecycle {
	t.Helper()
	db.Host(t)
	rep, _ := reconcile.Reconcile(ctx, db.DB)
	require.NotEqual(t, reconcile.Failed, rep.Step(reconcile.StepShape).Status, "%+v", rep.Steps)
	l, err := transcript.NewLifecycle(db.DB)
	require.NoError(t, err)
	return l
}

// lifecycleStore is lifecycleDB with a new store that keeps its rows in
// step, in workspace /ws.
func lifecycleStore(t *testing.T, db *dbtest.DB) (*transcript.Lifecycle, *transcript.Store) {
	t.Helper()
	l := lifecycleDB(t, db)
	return l, newStore(t, transcript.WithLifecycle(l, "/ws"))
}

// unwritableStore is lifecycleStore with a store whose storage root cannot
// be created: a path component of it is a regular file (ENOTDIR, even as
// root).
func unwritableStore(t *testing.T, db *dbtest.DB) (*transcript.Lifecycle, *transcript.Store) {
	t.Helper()
	l := lifecycleDB(t, db)
	blocker := filepath.Join(t.TempDir(), "not-a-directory")
	require.NoError(t, os.WriteFile(blocker, []byte("x"), 0o644))
	s, err := transcript.NewStore(filepath.Join(blocker, "conversation"), transcript.WithLifecycle(l, "/ws"))
	require.NoError(t, err)
	return l, s
}
