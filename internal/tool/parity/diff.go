package parity

import (
	"fmt"
	"slices"
	"sort"
)

// Difference is one way two snapshots disagree about an owned table.
type Difference struct {
	Table string `json:"table"`
	// Kind is "table", "column", "primary_key", "index", "foreign_key" or
	// "check".
	Kind string `json:"kind"`
	Name string `json:"name"`
	// Want and Got describe the element in the reference snapshot and in the
	// compared one; "(absent)" where one side has no such element.
	Want string `json:"want"`
	Got  string `json:"got"`
}

func (d Difference) String() string {
	return fmt.Sprintf("%s %s %s: want %s, got %s", d.Table, d.Kind, d.Name, d.Want, d.Got)
}

const absent = "(absent)"

// Compare lists every difference of got from want, in a stable order (by
// table, then kind, then name). Nil means identical.
func Compare(want, got *Snapshot) []Difference {
	var out []Difference
	for _, name := range tableNames(want, got) {
		w, g := want.Tables[name], got.Tables[name]
		switch {
		case w == nil:
			out = append(out, Difference{Table: name, Kind: "table", Name: name, Want: absent, Got: "present"})
		case g == nil:
			out = append(out, Difference{Table: name, Kind: "table", Name: name, Want: "present", Got: absent})
		default:
			out = append(out, compareTable(name, w, g)...)
		}
	}
	return out
}

func tableNames(a, b *Snapshot) []string {
	seen := map[string]bool{}
	for n := range a.Tables {
		seen[n] = true
	}
	for n := range b.Tables {
		seen[n] = true
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func compareTable(table string, w, g *Table) []Difference {
	var out []Difference
	add := func(kind, name, want, got string) {
		out = append(out, Difference{Table: table, Kind: kind, Name: name, Want: want, Got: got})
	}
	wc, gc := map[string]Column{}, map[string]Column{}
	for _, c := range w.Columns {
		wc[c.Name] = c
	}
	for _, c := range g.Columns {
		gc[c.Name] = c
	}
	for _, c := range w.Columns {
		if o, ok := gc[c.Name]; !ok {
			add("column", c.Name, c.describe(), absent)
		} else if c.describe() != o.describe() {
			add("column", c.Name, c.describe(), o.describe())
		}
	}
	for _, c := range g.Columns {
		if _, ok := wc[c.Name]; !ok {
			add("column", c.Name, absent, c.describe())
		}
	}
	if !slices.Equal(w.PrimaryKey, g.PrimaryKey) {
		add("primary_key", "", fmt.Sprint(w.PrimaryKey), fmt.Sprint(g.PrimaryKey))
	}
	for _, p := range pair(w.Indexes, g.Indexes, Index.key, func(a, b Index) bool {
		return a.Unique == b.Unique && slices.Equal(a.Columns, b.Columns) && a.Predicate == b.Predicate
	}) {
		if want, got := p.sides(Index.describe); want != got {
			add("index", p.name, want, got)
		}
	}
	for _, p := range pair(w.ForeignKeys, g.ForeignKeys, ForeignKey.key, func(a, b ForeignKey) bool {
		return a.describe() == b.describe()
	}) {
		if want, got := p.sides(ForeignKey.describe); want != got {
			add("foreign_key", p.name, want, got)
		}
	}
	for _, p := range pair(w.Checks, g.Checks, Check.key, func(a, b Check) bool { return a.Expr == b.Expr }) {
		if want, got := p.sides(func(c Check) string { return "CHECK " + c.Expr }); want != got {
			add("check", p.name, want, got)
		}
	}
	return out
}

type paired[T any] struct {
	name string
	a, b *T
}

// sides describes each side of p, absent for a missing one.
func (p paired[T]) sides(describe func(T) string) (want, got string) {
	want, got = absent, absent
	if p.a != nil {
		want = describe(*p.a)
	}
	if p.b != nil {
		got = describe(*p.b)
	}
	return want, got
}

// pair matches elements by name; an element without a name of its own (a
// SQLite autoindex, an unnamed SQLite foreign key) is then matched with an
// unmatched element of the other side that covers the same thing (same),
// whatever that one is called. Unmatched elements pair with nil.
func pair[T any](as, bs []T, key func(T) string, same func(a, b T) bool) []paired[T] {
	var out []paired[T]
	usedB := make([]bool, len(bs))
	var restA []int
	for i := range as {
		found := false
		for j := range bs {
			if !usedB[j] && key(as[i]) == key(bs[j]) {
				out = append(out, paired[T]{name: key(as[i]), a: &as[i], b: &bs[j]})
				usedB[j], found = true, true
				break
			}
		}
		if !found {
			restA = append(restA, i)
		}
	}
	for _, i := range restA {
		found := false
		for j := range bs {
			if usedB[j] || !same(as[i], bs[j]) || (named(key(as[i])) && named(key(bs[j]))) {
				continue
			}
			name := key(as[i])
			if !named(name) {
				name = key(bs[j])
			}
			out = append(out, paired[T]{name: name, a: &as[i], b: &bs[j]})
			usedB[j], found = true, true
			break
		}
		if !found {
			out = append(out, paired[T]{name: key(as[i]), a: &as[i]})
		}
	}
	for j := range bs {
		if !usedB[j] {
			out = append(out, paired[T]{name: key(bs[j]), b: &bs[j]})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

func named(key string) bool { return len(key) < 10 || key[:10] != "(unnamed) " }
