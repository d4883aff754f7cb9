// Package redact removes credentials from text before it is printed. It is
// the one place the CLI's output (results, JSON, logs, errors) goes through:
// a Writer wraps stdout and stderr, so a message cannot reach the operator
// without passing here, whichever package produced it.
//
// Two mechanisms, because neither alone is enough:
//   - patterns: a URL's userinfo password (scheme://user:PASSWORD@) and the
//     value of a password-like key (password=, PGPASSWORD=, sslpassword=, …,
//     in a URL query or a libpq keyword string, quoted or not);
//   - known secrets: the passwords taken out of the DSNs the process was given
//     (Secrets) and of PGPASSWORD, replaced wherever they appear verbatim —
//     also inside a driver error that echoes a DSN, a malformed URL a parser
//     quotes back, or a JSON string.
package redact

import (
	"encoding/json"
	"io"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"sync"
)

// Mask replaces every redacted value.
const Mask = "xxxxx"

// minLiteral is the shortest known secret replaced wherever it appears: a
// one- or two-character password would otherwise blank out ordinary words.
// Passwords that short are still removed from their structured places (a
// URL's userinfo, a password= value).
const minLiteral = 3

var (
	// userinfo: scheme://user:PASSWORD@ — the password runs to the last '@'
	// before a '/', whitespace or a quote, as url.Parse reads it.
	userinfo = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.\-]*://[^:/@\s"'` + "`" + `]*:)[^/\s"'` + "`" + `]*@`)
	// keyValue: password=VALUE in a query (&-separated) or a keyword DSN
	// (space-separated, possibly single-quoted), and PGPASSWORD=VALUE.
	keyValue = regexp.MustCompile(`(?i)\b((?:pg)?(?:ssl)?(?:password|passwd|passphrase)\s*=\s*)('(?:[^'\\]|\\.)*'?|[^&\s"'` + "`" + `;]*)`)
)

// String returns s with every password pattern and every known secret masked.
func String(s string, secrets ...string) string {
	for _, sec := range secrets {
		if len(sec) >= minLiteral {
			s = strings.ReplaceAll(s, sec, Mask)
		}
	}
	s = userinfo.ReplaceAllString(s, "${1}"+Mask+"@")
	return keyValue.ReplaceAllStringFunc(s, func(m string) string {
		sub := keyValue.FindStringSubmatch(m)
		if sub[2] == "" || sub[2] == Mask {
			return m
		}
		return sub[1] + Mask
	})
}

// Secrets extracts the passwords a DSN carries, in every spelling a message
// might repeat them: as written, percent-decoded, and JSON-escaped. It works on
// DSNs that do not parse, since those are the ones parsers quote back.
func Secrets(dsn string) []string {
	var raw []string
	if i := strings.Index(dsn, "://"); i >= 0 {
		rest := dsn[i+3:]
		if at := strings.LastIndex(rest, "@"); at >= 0 {
			ui := rest[:at]
			if c := strings.Index(ui, ":"); c >= 0 {
				pw := ui[c+1:]
				raw = append(raw, pw)
				// A password with an unescaped '/', '?' or '@' is read
				// differently by different parsers: mask each reading.
				if j := strings.IndexAny(pw, "/?#@"); j > 0 {
					raw = append(raw, pw[:j])
				}
			}
		}
	}
	for _, m := range keyValue.FindAllStringSubmatch(dsn, -1) {
		v := m[2]
		if strings.HasPrefix(v, "'") {
			v = strings.TrimSuffix(strings.TrimPrefix(v, "'"), "'")
		}
		raw = append(raw, v)
	}
	var out []string
	for _, r := range raw {
		if r == "" {
			continue
		}
		out = append(out, r)
		if d, err := url.PathUnescape(r); err == nil && d != r {
			out = append(out, d)
		}
		if d, err := url.QueryUnescape(r); err == nil && d != r {
			out = append(out, d)
		}
		if b, err := json.Marshal(r); err == nil {
			if j := string(b[1 : len(b)-1]); j != r {
				out = append(out, j)
			}
		}
	}
	return dedupe(out)
}

// dedupe sorts longest first, so a secret that contains another is masked
// whole rather than leaving its remainder.
func dedupe(xs []string) []string {
	sort.Slice(xs, func(i, j int) bool { return len(xs[i]) > len(xs[j]) })
	out := xs[:0]
	for i, x := range xs {
		if i == 0 || x != xs[i-1] {
			out = append(out, x)
		}
	}
	return out
}

// Writer masks what is written through it. Every message the CLI prints is
// written in one Write call (a line, a log record, a JSON document), so a
// secret is never split across two writes.
type Writer struct {
	mu      sync.Mutex
	w       io.Writer
	secrets []string
}

// NewWriter wraps w; secrets are masked verbatim in addition to the patterns.
func NewWriter(w io.Writer, secrets []string) *Writer {
	return &Writer{w: w, secrets: dedupe(append([]string(nil), secrets...))}
}

// Write masks p and writes it whole. It reports len(p) on success, as callers
// count what they handed over, not what reached the terminal.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, err := io.WriteString(w.w, String(string(p), w.secrets...)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Unwrap returns the underlying writer (to ask whether it is a terminal).
func (w *Writer) Unwrap() io.Writer { return w.w }
