package transcript

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Load reads the transcript for (session, agent): the finished document if
// there is one, else the rendering of the running log.
// It holds every event in memory: Open streams them.
func (s *Store) Load(session, agent string) (*Transcript, error) {
	r, err := s.Open(context.Background(), session, agent)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return r.collect(context.Background())
}

// LoadPath reads a transcript from a path naming its .json document, its
// .events.jsonl log, or their common stem.
//
// It holds every event in memory: OpenPath streams them. A file that exists
// but is not a transcript — named otherwise, a directory,
// or a .json / .events.jsonl this package did not write — is ErrNotTranscript,
// not ErrNotFound: the reader pointed at something, and it is not one.
func LoadPath(path string) (*Transcript, error) {
	r, err := OpenPath(context.Background(), path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return r.collect(context.Background())
}

// stem is name without its transcript suffix, and whether it had one. One
// suffix only, the log's tried first: the log of agent "x.json" is
// "x.json.events.jsonl".
func stem(name string) (string, bool) {
	for _, suffix := range []string{logSuffix, finalSuffix} {
		if strings.HasSuffix(name, suffix) {
			return strings.TrimSuffix(name, suffix), true
		}
	}
	return name, false
}

// ours reports whether the file at path was written by this package, as far
// as its start tells: a .json document naming Format (or one too damaged to
// say), an event log whose first line is a header. A damaged transcript is
// corrupt; a file that never was one is not a transcript.
func ours(path string) bool {
	f, err := openRegular(path, os.O_RDONLY)
	if err != nil {
		return true
	}
	defer f.Close()
	if strings.HasSuffix(path, logSuffix) {
		line, _, _, err := newLineReader(context.Background(), f, path).next()
		var l logLine
		return err == nil && json.Unmarshal(line, &l) == nil && l.Type == headerType && l.Header != nil
	}
	var doc struct {
		Format *string `json:"format"`
	}
	lim := &budgetReader{ctx: context.Background(), r: f, limit: MaxLine, name: path}
	lim.reset()
	if err := json.NewDecoder(lim).Decode(&doc); err != nil {
		var syn *json.SyntaxError
		// Not JSON at all is damage; JSON of another shape is not ours.
		return errors.As(err, &syn) || errors.Is(err, io.ErrUnexpectedEOF)
	}
	return doc.Format != nil && *doc.Format == Format
}

// Summary is one transcript as List sees it.
type Summary struct {
	SessionID string `json:"session_id"`
	AgentID   string `json:"agent_id"`
	Kind      Kind   `json:"kind,omitempty"`
	Status    Status `json:"status,omitempty"`
	Events    int    `json:"events"`
	Path      string `json:"path"`
	// Err is why the transcript could not be read ("" when it could).
	Err string `json:"error,omitempty"`
}

// List reads the summary of every transcript of one parent session, sorted
// by agent id; each is read as it streams past (its events counted, not
// kept). A session directory that is a symbolic link is refused.
func (s *Store) List(ctx context.Context, session string) ([]Summary, error) {
	if err := ValidateID("session id", session); err != nil {
		return nil, err
	}
	dir := filepath.Join(s.root, backgroundDir, session)
	entries, err := readCheckedDir(filepath.Dir(dir), dir)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []Summary
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") || e.IsDir() {
			continue
		}
		agent, named := stem(name)
		if !named {
			continue
		}
		if seen[agent] || ValidateID("agent id", agent) != nil {
			continue
		}
		seen[agent] = true
		sum := Summary{SessionID: session, AgentID: agent}
		r, err := s.Open(ctx, session, agent)
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return nil, err
		}
		if err != nil {
			sum.Err = err.Error()
			sum.Path = filepath.Join(dir, agent+finalSuffix)
		} else {
			t := r.Summary()
			sum.Kind, sum.Status, sum.Events, sum.Path = t.Kind, t.Status, r.Len(), t.Path
			r.Close()
		}
		out = append(out, sum)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].AgentID < out[j].AgentID })
	return out, nil
}

// Sessions lists the parent session ids that have a transcript directory
// (a directory of its own: a symbolic link is not one).
func (s *Store) Sessions() ([]string, error) {
	bg := filepath.Join(s.root, backgroundDir)
	entries, err := readCheckedDir(bg)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() && ValidateID("session id", e.Name()) == nil {
			out = append(out, e.Name())
		}
	}
	return out, nil
}
