// Package ctxio makes a read stop when its context is done, even a read that
// would block for ever (a pipe nobody writes to) or never end (/dev/zero).
package ctxio

import (
	"context"
	"io"
	"sync"
)

// chunk is the most one read of the underlying reader asks for.
const chunk = 64 << 10

type reader struct {
	ctx   context.Context
	r     io.Reader
	start sync.Once
	data  chan result
	free  chan []byte
	cur   []byte // the buffer rd.left is part of, returned to free when read
	left  []byte
	err   error
}

type result struct {
	b   []byte
	err error
}

// NewReader returns a reader of r whose Read returns ctx's error once ctx is
// done. From the first Read on, r is read by a goroutine of its own, one
// chunk ahead at most, through two buffers it reuses; a read of r still
// blocked when ctx ends is abandoned (it ends with the process, or when r
// returns), and the goroutine then stops.
func NewReader(ctx context.Context, r io.Reader) io.Reader {
	rd := &reader{ctx: ctx, r: r, data: make(chan result), free: make(chan []byte, 2)}
	rd.free <- make([]byte, chunk)
	rd.free <- make([]byte, chunk)
	return rd
}

func (rd *reader) pump() {
	for {
		var b []byte
		select {
		case b = <-rd.free:
		case <-rd.ctx.Done():
			return
		}
		n, err := rd.r.Read(b[:cap(b)])
		select {
		case rd.data <- result{b[:n], err}:
		case <-rd.ctx.Done():
			return
		}
		if err != nil {
			return
		}
	}
}

func (rd *reader) Read(p []byte) (int, error) {
	if err := rd.ctx.Err(); err != nil {
		return 0, err
	}
	rd.start.Do(func() { go rd.pump() })
	for len(rd.left) == 0 {
		if rd.err != nil {
			return 0, rd.err
		}
		if rd.cur != nil {
			rd.free <- rd.cur
			rd.cur = nil
		}
		select {
		case res := <-rd.data:
			rd.cur, rd.left, rd.err = res.b, res.b, res.err
		case <-rd.ctx.Done():
			return 0, rd.ctx.Err()
		}
	}
	n := copy(p, rd.left)
	rd.left = rd.left[n:]
	return n, nil
}
