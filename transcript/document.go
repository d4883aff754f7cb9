package transcript

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
)

// MaxLine is the longest line read from a provider stream or an event log,
// and the largest event a transcript document is read with (16 MiB): memory
// follows the largest line, never the transcript's size. A longer line is
// reported with its file and number, read past, never held.
const MaxLine = 16 << 20

// ErrLineTooLong: a log line or a document's event is longer than
// MaxLine. This package never writes one (Append refuses it).
var ErrLineTooLong = errors.New("transcript: line too long")

// lineReader reads the lines of one file, each at most MaxLine bytes,
// checking ctx between reads.
type lineReader struct {
	ctx  context.Context
	br   *bufio.Reader
	name string
	max  int
	n    int   // lines returned so far
	off  int64 // offset of the next line
	buf  []byte
}

func newLineReader(ctx context.Context, r io.Reader, name string) *lineReader {
	return &lineReader{ctx: ctx, br: bufio.NewReaderSize(r, 64<<10), name: name, max: MaxLine}
}

// next returns the next complete line without its newline (valid until the
// next call) and its offset. At the end it returns io.EOF and, in torn, the
// length of bytes after the last newline (a line being written, or torn by a
// crash), which are not kept. A line longer than the limit is ErrLineTooLong.
func (lr *lineReader) next() (line []byte, off int64, torn int64, err error) {
	if cap(lr.buf) > 1<<20 {
		lr.buf = nil // a long line does not pin its memory for the rest of the file
	}
	lr.buf = lr.buf[:0]
	off = lr.off
	var length int64
	for {
		if err := lr.ctx.Err(); err != nil {
			return nil, off, 0, err
		}
		chunk, rerr := lr.br.ReadSlice('\n')
		body := bytes.TrimSuffix(chunk, []byte{'\n'})
		length += int64(len(body))
		lr.off += int64(len(chunk))
		if length <= int64(lr.max) {
			lr.buf = appendBounded(lr.buf, body, lr.max)
		}
		switch {
		case errors.Is(rerr, bufio.ErrBufferFull):
			continue
		case rerr == io.EOF:
			return nil, off, length, io.EOF
		case rerr != nil:
			return nil, off, 0, fmt.Errorf("read %s: %w", lr.name, rerr)
		}
		lr.n++
		if length > int64(lr.max) {
			return nil, off, 0, fmt.Errorf("%w: %s line %d is %d bytes, longer than the %d-byte limit", ErrLineTooLong, lr.name, lr.n, length, lr.max)
		}
		return lr.buf, off, 0, nil
	}
}

// appendBounded appends b to buf, growing it by doubling but never past limit
// bytes, so a line just under the limit costs about twice the limit in
// allocations, and never more than the limit held.
func appendBounded(buf, b []byte, limit int) []byte {
	if need := len(buf) + len(b); need > cap(buf) {
		nb := make([]byte, len(buf), min(max(2*cap(buf), need, 4096), limit))
		copy(nb, buf)
		buf = nb
	}
	return append(buf, b...)
}

// budgetReader lets a json.Decoder read at most limit bytes between resets,
// checking ctx on every read: one value of a document is held whole by the
// decoder, so no value may be longer than the budget.
type budgetReader struct {
	ctx   context.Context
	r     io.Reader
	left  int64
	limit int64
	name  string
}

func (b *budgetReader) Read(p []byte) (int, error) {
	if err := b.ctx.Err(); err != nil {
		return 0, err
	}
	if b.left <= 0 {
		return 0, fmt.Errorf("%w: %s holds a value longer than %d bytes", ErrLineTooLong, b.name, MaxLine)
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *budgetReader) reset() { b.left = b.limit }

// docDecoder walks a finished document's top-level object: every member but
// "events" is held raw (they are small); "events" is an array read one event
// at a time, none longer than MaxLine.
type docDecoder struct {
	dec  *json.Decoder
	br   *budgetReader
	name string
}

func newDocDecoder(ctx context.Context, f *os.File) (*docDecoder, error) {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	// The decoder may read ahead of the value it decodes: twice the limit
	// leaves room for that, and each event is checked against MaxLine itself.
	br := &budgetReader{ctx: ctx, r: bufio.NewReaderSize(f, 64<<10), limit: 2*MaxLine + 64<<10, name: f.Name()}
	br.reset()
	d := &docDecoder{dec: json.NewDecoder(br), br: br, name: f.Name()}
	if err := d.delim('{'); err != nil {
		return nil, err
	}
	return d, nil
}

func (d *docDecoder) corrupt(err error) error {
	if errors.Is(err, ErrLineTooLong) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("%w: %s is not a finished transcript document (%v)", ErrCorrupt, d.name, err)
}

func (d *docDecoder) delim(want json.Delim) error {
	tok, err := d.dec.Token()
	if err != nil {
		return d.corrupt(err)
	}
	if tok != want {
		return d.corrupt(fmt.Errorf("%v where %v belongs", tok, want))
	}
	return nil
}

// members calls member for each member name of the top-level object, then
// checks the document ends there; member decodes the value.
func (d *docDecoder) members(member func(name string) error) error {
	for d.dec.More() {
		tok, err := d.dec.Token()
		if err != nil {
			return d.corrupt(err)
		}
		name, _ := tok.(string)
		d.br.reset()
		if err := member(name); err != nil {
			return err
		}
	}
	if err := d.delim('}'); err != nil {
		return err
	}
	if _, err := d.dec.Token(); err != io.EOF {
		return d.corrupt(errors.New("data after the document"))
	}
	return nil
}

// events decodes the "events" array, one event at a time.
func (d *docDecoder) events(fn func(Event) error) error {
	if err := d.delim('['); err != nil {
		return err
	}
	for i := 0; d.dec.More(); i++ {
		d.br.reset()
		start := d.dec.InputOffset()
		var e Event
		if err := d.dec.Decode(&e); err != nil {
			return d.corrupt(err)
		}
		if n := d.dec.InputOffset() - start; n > MaxLine {
			return fmt.Errorf("%w: %s event %d is %d bytes, longer than the %d-byte limit", ErrLineTooLong, d.name, i+1, n, MaxLine)
		}
		if err := fn(e); err != nil {
			return err
		}
	}
	return d.delim(']')
}

// readDocSummary reads a finished document: every member but its events,
// which are counted.
func readDocSummary(ctx context.Context, f *os.File) (*Transcript, int, error) {
	d, err := newDocDecoder(ctx, f)
	if err != nil {
		return nil, 0, err
	}
	raw := map[string]json.RawMessage{}
	n, sawEvents := 0, false
	err = d.members(func(name string) error {
		if name != "events" {
			var v json.RawMessage
			if err := d.dec.Decode(&v); err != nil {
				return d.corrupt(err)
			}
			raw[name] = v
			return nil
		}
		if sawEvents {
			return d.corrupt(errors.New(`"events" given twice`))
		}
		sawEvents = true
		return d.events(func(Event) error { n++; return nil })
	})
	if err != nil {
		return nil, 0, err
	}
	b, err := json.Marshal(raw)
	if err != nil {
		return nil, 0, d.corrupt(err)
	}
	var t Transcript
	if err := json.Unmarshal(b, &t); err != nil || t.Format != Format || !t.Status.Terminal() {
		return nil, 0, fmt.Errorf("%w: %s is not a finished transcript document (%v)", ErrCorrupt, f.Name(), err)
	}
	return &t, n, nil
}

// eachDocEvent yields a finished document's events.
func eachDocEvent(ctx context.Context, f *os.File, fn func(Event) error) error {
	d, err := newDocDecoder(ctx, f)
	if err != nil {
		return err
	}
	return d.members(func(name string) error {
		if name == "events" {
			return d.events(fn)
		}
		var skip json.RawMessage
		if err := d.dec.Decode(&skip); err != nil {
			return d.corrupt(err)
		}
		return nil
	})
}

// writeDocument writes the finished document of t (its events yielded by
// each) as json.MarshalIndent(t, "", "  ") would, plus a newline, without
// holding more than one event.
func writeDocument(w io.Writer, t *Transcript, each func(func(Event) error) error) error {
	head := *t
	head.Events = nil
	b, err := json.MarshalIndent(&head, "", "  ")
	if err != nil {
		return err
	}
	const tail = `"events": null` + "\n}"
	if !bytes.HasSuffix(b, []byte(tail)) {
		return fmt.Errorf("transcript: document head does not end with its events: %q", b[max(0, len(b)-40):])
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	bw.Write(b[:len(b)-len(tail)])
	bw.WriteString(`"events": [`)
	n := 0
	err = each(func(e Event) error {
		eb, err := json.MarshalIndent(e, "    ", "  ")
		if err != nil {
			return err
		}
		if n > 0 {
			bw.WriteByte(',')
		}
		bw.WriteString("\n    ")
		_, err = bw.Write(eb)
		n++
		return err
	})
	if err != nil {
		return err
	}
	if n > 0 {
		bw.WriteString("\n  ")
	}
	bw.WriteString("]\n}\n")
	return bw.Flush()
}
