package transcript

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/schemastate/schemastate/transcript/internal/normalize"
)

// A running transcript is rendered from its event log (openLog) in two
// passes: planLog reads the log once and plans which results fold into
// which calls; foldPlan.each reads it again, yielding events as planned.

// foldPlan is what rendering a log needs to know ahead, from one pass over
// it: which tool result each call carries (its line's offset and length:
// read again when the call is yielded) and which results are folded into a
// call rather than standing alone. It holds a few words per tool event,
// never an event.
type foldPlan struct {
	name   string
	count  int
	result map[int64]lineRef // call seq → the line of its final result
	skip   map[int64]bool    // seqs of results folded into a call
}

type lineRef struct{ off, n int64 }

// planLog reads an event log once: it checks every line (a complete line
// that does not parse, or a seq out of order, is corruption; bytes after the
// last newline are a torn line, ignored), returns the transcript's summary
// and the plan of its rendering, and the offset after its last complete
// line. Results fold as render folds them: into the call they belong to, the
// last one winning; one that arrives before its call is folded into it when
// the call arrives; one whose call never appears stays a standalone event.
func planLog(ctx context.Context, f io.Reader, name string) (*Transcript, *foldPlan, int64, error) {
	lr := newLineReader(ctx, f, name)
	plan := &foldPlan{name: name, result: map[int64]lineRef{}, skip: map[int64]bool{}}
	var (
		h       *Header
		lastSeq int64
		end     int64
	)
	fold := &folding{plan: plan, calls: map[string]int64{}, early: map[string][]int64{}}
	for {
		line, off, torn, err := lr.next()
		if err == io.EOF {
			if h == nil {
				return nil, nil, 0, fmt.Errorf("%w: %s has no complete header line", ErrCorrupt, name)
			}
			t := &Transcript{Format: Format, Header: *h, Status: Running, LastSeq: lastSeq, TornBytes: int(torn)}
			return t, plan, end, nil
		}
		if err != nil {
			return nil, nil, 0, err
		}
		end = off + int64(len(line)) + 1
		n := lr.n
		l, err := parseLine(line, name, n)
		if err != nil {
			return nil, nil, 0, err
		}
		if n == 1 {
			h = l.Header
			continue
		}
		lastSeq = l.Seq
		fold.add(&l.Event, lineRef{off, int64(len(line))})
	}
}

// folding is planLog's state between lines: the calls read so far and the
// results still waiting for theirs.
type folding struct {
	plan  *foldPlan
	calls map[string]int64   // call id → seq of its latest call
	early map[string][]int64 // call id → seqs of results still without a call
}

// add enters event e, read from the line at ref, in the plan: a result
// folds into its call when the call was read, else waits for it; a call
// takes the latest of the results that arrived before it.
func (f *folding) add(e *Event, ref lineRef) {
	plan := f.plan
	switch e.Type {
	case ToolResult:
		id := e.Result.CallID
		if c, ok := f.calls[id]; ok {
			plan.result[c] = ref
			plan.skip[e.Seq] = true
			return
		}
		f.early[id] = append(f.early[id], e.Seq)
		plan.result[-e.Seq] = ref // where a later call finds it
	case ToolCall:
		id := e.Call.ID
		f.calls[id] = e.Seq
		if rs := f.early[id]; len(rs) > 0 {
			plan.result[e.Seq] = plan.result[-rs[len(rs)-1]]
			for _, r := range rs {
				plan.skip[r] = true
				delete(plan.result, -r)
			}
			plan.count -= len(rs)
			delete(f.early, id)
		}
	}
	plan.count++
}

// parseLine decodes and checks log line n.
func parseLine(line []byte, name string, n int) (logLine, error) {
	var l logLine
	if err := json.Unmarshal(line, &l); err != nil {
		return l, fmt.Errorf("%w: %s line %d: %v", ErrCorrupt, name, n, err)
	}
	switch {
	case n == 1:
		if l.Type != headerType || l.Header == nil || l.Seq != 0 {
			return l, fmt.Errorf("%w: %s line 1 is not a header", ErrCorrupt, name)
		}
	case l.Seq != int64(n-1):
		return l, fmt.Errorf("%w: %s line %d has seq %d, want %d", ErrCorrupt, name, n, l.Seq, n-1)
	default:
		if err := normalize.Validate(l.Event); err != nil {
			return l, fmt.Errorf("%w: %s line %d: %v", ErrCorrupt, name, n, err)
		}
	}
	return l, nil
}

// each yields the log's events up to end, rendered by the plan.
func (p *foldPlan) each(ctx context.Context, f *os.File, end int64, fn func(Event) error) error {
	lr := newLineReader(ctx, io.NewSectionReader(f, 0, end), p.name)
	var resBuf []byte
	for {
		line, _, _, err := lr.next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		l, err := parseLine(line, p.name, lr.n)
		if err != nil {
			return err
		}
		if lr.n == 1 || p.skip[l.Seq] {
			continue
		}
		e := l.Event
		if ref, ok := p.result[e.Seq]; ok && e.Type == ToolCall {
			if int64(cap(resBuf)) < ref.n {
				resBuf = make([]byte, ref.n)
			}
			resBuf = resBuf[:ref.n]
			if _, err := f.ReadAt(resBuf, ref.off); err != nil {
				return fmt.Errorf("read %s at %d: %w", p.name, ref.off, err)
			}
			var rl logLine
			if err := json.Unmarshal(resBuf, &rl); err != nil || rl.Result == nil {
				return fmt.Errorf("%w: %s: the result of call %s at offset %d changed (%v)", ErrCorrupt, p.name, e.Call.ID, ref.off, err)
			}
			r := *rl.Result
			r.Seq = rl.Seq
			at := rl.At
			r.At = &at
			e.Result = &r
		}
		if err := fn(e); err != nil {
			return err
		}
	}
}
