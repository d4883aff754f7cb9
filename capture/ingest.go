package capture

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
)

// Malformed is an ingest line that is not a valid frame.
type Malformed struct {
	Line   int
	Length int64  // the line's length in bytes, without its newline
	Reason string // at most a short excerpt of any bad value (under 1 KiB in all)
}

// IngestResult is what one Ingest did.
type IngestResult struct {
	Lines     int      `json:"lines"`     // lines read, blank ones included
	Frames    int      `json:"frames"`    // lines that parsed and reached the writer
	Malformed int      `json:"malformed"` // lines that did not parse, or were too long
	Counters  Counters `json:"counters"`  // this Writer's counters after the run
}

// DefaultMaxLine is the longest line Ingest reads as a frame (16 MiB).
const DefaultMaxLine = 16 << 20

// maxReason bounds a Malformed reason, whatever the decoder said.
const maxReason = 512

// IngestOption configures one Ingest.
type IngestOption func(*ingestConfig)

type ingestConfig struct{ maxLine int }

// WithMaxLine sets the longest line, in bytes without its newline, that
// Ingest reads as a frame (default DefaultMaxLine). A longer line is skipped
// as it streams past, never held whole, and reported malformed.
func WithMaxLine(n int) IngestOption {
	return func(c *ingestConfig) {
		if n > 0 {
			c.maxLine = n
		}
	}
}

// Ingest reads newline-delimited frames from r and records each in order. A
// line that does not parse, or is longer than the maximum line length, is
// passed to onMalformed and skipped; blank lines are ignored; a UTF-8
// byte-order mark before the first line is ignored. Memory per line is
// bounded by the maximum line length, so input of any size streams. The error
// is a read error or ctx's; a failed write is not an error here — it is
// counted as failed, as on the live path, and its WARN names the line.
func (w *Writer) Ingest(ctx context.Context, r io.Reader, onMalformed func(Malformed), opts ...IngestOption) (IngestResult, error) {
	cfg := ingestConfig{maxLine: DefaultMaxLine}
	for _, o := range opts {
		o(&cfg)
	}
	var res IngestResult
	lr := newLineReader(r, cfg.maxLine)
	malformed := func(length int64, reason string) {
		res.Malformed++
		if onMalformed != nil {
			onMalformed(Malformed{Line: res.Lines, Length: length, Reason: clip(reason, maxReason)})
		}
	}
	for {
		if err := ctx.Err(); err != nil {
			res.Counters = w.Counters()
			return res, err
		}
		l, ok, readErr := lr.next()
		if ok {
			res.Lines++
			switch trimmed := bytes.TrimSpace(l.b); {
			case l.tooLong:
				malformed(l.length, fmt.Sprintf("line of %d bytes is longer than the maximum line length (%d bytes)", l.length, cfg.maxLine))
			case len(trimmed) == 0:
			default:
				if f, err := ParseFrame(trimmed); err != nil {
					malformed(l.length, err.Error())
				} else {
					res.Frames++
					_ = w.record(ctx, f, res.Lines) // counted and logged by record (AC-27)
				}
			}
		}
		if readErr == io.EOF {
			break
		}
		if readErr != nil {
			res.Counters = w.Counters()
			return res, fmt.Errorf("capture: read frames: %w", readErr)
		}
	}
	res.Counters = w.Counters()
	return res, nil
}

// lineReader yields lines of at most max bytes. A longer line is read past in
// buffer-sized pieces and only its length is kept.
type lineReader struct {
	br    *bufio.Reader
	max   int
	buf   []byte
	first bool
}

func newLineReader(r io.Reader, max int) *lineReader {
	return &lineReader{br: bufio.NewReaderSize(r, 64<<10), max: max, first: true}
}

// utf8BOM is the byte-order mark some editors put before the first line.
var utf8BOM = []byte{0xEF, 0xBB, 0xBF}

// inputLine is one line of input without its newline.
type inputLine struct {
	b       []byte // the line; valid until the next read; nil when tooLong
	length  int64  // its length in bytes
	tooLong bool   // longer than the maximum: read past, not kept
}

// next reads the next line. ok is false when nothing was left to read; err
// is the read error (io.EOF at the end), which may come with a last line.
func (lr *lineReader) next() (l inputLine, ok bool, err error) {
	if cap(lr.buf) > 1<<20 {
		lr.buf = nil // a long line does not pin its memory for the rest of the stream
	}
	lr.buf = lr.buf[:0]
	for {
		chunk, err := lr.br.ReadSlice('\n')
		ok = ok || len(chunk) > 0
		if lr.first {
			lr.first = false
			chunk = bytes.TrimPrefix(chunk, utf8BOM)
		}
		body := bytes.TrimSuffix(chunk, []byte{'\n'})
		l.length += int64(len(body))
		if !l.tooLong {
			if len(lr.buf)+len(body) > lr.max {
				l.tooLong = true
				lr.buf = nil
			} else {
				lr.buf = appendBounded(lr.buf, body, lr.max)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if !l.tooLong {
			l.b = lr.buf
		}
		return l, ok, err
	}
}

// appendBounded appends b to buf, growing it by doubling but never past limit
// bytes, so a line just under the limit costs at most limit bytes of buffer.
func appendBounded(buf, b []byte, limit int) []byte {
	if need := len(buf) + len(b); need > cap(buf) {
		c := min(max(2*cap(buf), need, 4096), limit)
		nb := make([]byte, len(buf), c)
		copy(nb, buf)
		buf = nb
	}
	return append(buf, b...)
}
