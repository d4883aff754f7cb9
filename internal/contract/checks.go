package contract

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"ariga.io/atlas/sql/schema"

	"github.com/schemastate/schemastate/internal/describe"
)

// checks: a CHECK over a column the writer writes is decided where its form
// is one the contract bounds (a least value, a set of values, NOT NULL, not
// empty); any other form over a written column is a notice. A NULL passes
// every CHECK, so only the values the writer writes count.
func (j *judge) checks() {
	for _, a := range j.t.T.Attrs {
		ck, ok := a.(*schema.Check)
		if !ok {
			continue
		}
		cols := j.written(ck.Expr)
		if len(cols) == 0 {
			continue
		}
		if len(cols) == 1 {
			if broken, frames, decided := j.decide(cols[0], ck.Expr); decided {
				if broken {
					j.add(true, CodeCheck, cols[0], ck.Name, "CHECK ("+ck.Expr+") rejects a value the writer writes", frames)
				}
				continue
			}
		}
		j.add(false, CodeCheck, strings.Join(cols, ", "), ck.Name,
			"CHECK ("+ck.Expr+") is over columns the writer writes, in a form the contract cannot decide", "writes whose values it rejects, if any")
	}
}

var (
	identRE  = regexp.MustCompile(`"((?:[^"]|"")+)"|[A-Za-z_][A-Za-z0-9_$]*`)
	stringRE = regexp.MustCompile(`'(?:[^']|'')*'`)
	quotedRE = regexp.MustCompile(`"(\w+)"`)
)

// written returns the columns of the writer that expr names.
func (j *judge) written(expr string) []string {
	var out []string
	for _, m := range identRE.FindAllStringSubmatch(stripStrings(expr), -1) {
		name := m[0]
		if m[1] != "" {
			name = strings.ReplaceAll(m[1], `""`, `"`)
		}
		if j.w.Writes(name) && !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out
}

// stripStrings blanks the string literals of expr, so a literal is never
// read as a column name.
func stripStrings(expr string) string {
	return stringRE.ReplaceAllString(expr, "''")
}

// The forms decided: col >= N, col > N, col IS NOT NULL, col <> ”,
// length(col) > 0, col IN (…), each as either dialect renders it (outer
// parentheses, casts PostgreSQL adds to literals, = ANY (ARRAY[…])).
var (
	cmpRE     = regexp.MustCompile(`^(\w+)\s*(>=|>)\s*\(?(-?\d+)\)?(?:::\w+)?$`)
	notNullRE = regexp.MustCompile(`(?i)^(\w+)\s+IS\s+NOT\s+NULL$`)
	nonEmpty  = regexp.MustCompile(`(?i)^(?:(\w+)\s*(?:<>|!=)\s*''(?:::text)?|length\(\s*(\w+)\s*\)\s*>\s*0)$`)
	inRE      = regexp.MustCompile(`(?i)^(\w+)(?:::text)?\s+IN\s*\((.*)\)$`)
	anyRE     = regexp.MustCompile(`(?i)^\(?(\w+)\)?(?:::text)?\s*=\s*ANY\s*\(\s*\(?ARRAY\[(.*)\]\)?(?:::text\[\])?\s*\)$`)
	literalRE = regexp.MustCompile(`^'((?:[^']|'')*)'(?:::\w+(?: varying)?)?$|^(-?\d+)$`)
)

// decide evaluates a one-column check against the column's contract:
// whether it rejects a value the writer writes, which frames, and whether
// the form could be decided at all.
func (j *judge) decide(col, expr string) (broken bool, frames string, decided bool) {
	cc := j.w.Column(col)
	if cc == nil {
		return false, "", false
	}
	e := normalize(expr)
	if m := notNullRE.FindStringSubmatch(e); m != nil && m[1] == col {
		return cc.Null != "", cc.Null, true
	}
	if m := nonEmpty.FindStringSubmatch(e); m != nil && (m[1] == col || m[2] == col) {
		return cc.Empty != "", cc.Empty, true
	}
	if m := cmpRE.FindStringSubmatch(e); m != nil && m[1] == col {
		n, _ := strconv.ParseInt(m[3], 10, 64)
		return decideBound(cc, m[2], n)
	}
	if m := inRE.FindStringSubmatch(e); m != nil && m[1] == col {
		return decideSet(cc, m[2])
	}
	if m := anyRE.FindStringSubmatch(e); m != nil && m[1] == col {
		return decideSet(cc, m[2])
	}
	return false, "", false
}

// decideBound: the writer's least value (or every value of its set) must
// pass col op n.
func decideBound(cc *Column, op string, n int64) (bool, string, bool) {
	pass := func(v int64) bool { return v > n || (op == ">=" && v == n) }
	switch {
	case cc.Min != nil:
		if pass(*cc.Min) {
			return false, "", true
		}
		frames := cc.MinFrames
		if frames == "" {
			frames = fmt.Sprintf("frames that write %s = %d", cc.Name, *cc.Min)
		}
		return true, frames, true
	case len(cc.Values) > 0:
		for _, v := range cc.Values {
			x, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return false, "", false
			}
			if !pass(x) {
				return true, fmt.Sprintf("frames that write %s = %s", cc.Name, v), true
			}
		}
		return false, "", true
	}
	return false, "", false
}

// decideSet: every value the writer writes must be one of list; a writer
// whose values are not bounded writes others.
func decideSet(cc *Column, list string) (bool, string, bool) {
	var allowed []string
	for _, item := range splitList(list) {
		m := literalRE.FindStringSubmatch(strings.TrimSpace(item))
		if m == nil {
			return false, "", false
		}
		allowed = append(allowed, strings.ReplaceAll(m[1], "''", "'")+m[2])
	}
	if len(cc.Values) == 0 {
		return true, fmt.Sprintf("frames whose %s is none of %s (the writer stores what it observes)", cc.Name, strings.Join(allowed, ", ")), true
	}
	for _, v := range cc.Values {
		if !slices.Contains(allowed, v) {
			return true, fmt.Sprintf("frames that write %s = %s", cc.Name, v), true
		}
	}
	return false, "", true
}

// splitList splits a list at the commas outside string literals.
func splitList(s string) []string {
	var out []string
	inStr, start := false, 0
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '\'':
			inStr = !inStr
		case s[i] == ',' && !inStr:
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}

// normalize strips a check's enclosing parentheses and identifier quotes.
func normalize(expr string) string {
	e := strings.TrimSpace(expr)
	for strings.HasPrefix(e, "(") && strings.HasSuffix(e, ")") && balanced(e[1:len(e)-1]) {
		e = strings.TrimSpace(e[1 : len(e)-1])
	}
	return quotedRE.ReplaceAllString(e, "$1")
}

// balanced reports whether s's parentheses pair up in order.
func balanced(s string) bool {
	lowest, final := describe.Depth(s)
	return lowest == 0 && final == 0
}
