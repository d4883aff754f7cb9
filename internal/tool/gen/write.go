package gen

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/schemastate/schemastate/dialect"
)

// batchRows is how many rows one multi-row INSERT carries. The widest table
// (22 columns) stays far below both dialects' bind-parameter limits.
const batchRows = 100

// commitEvery bounds a transaction by rows and by bytes, so a huge store is
// written in many modest transactions and the memory held is one batch.
const (
	commitEveryRows  = 20000
	commitEveryBytes = 32 << 20
)

// table buffers one batch of rows for one table.
type table struct {
	name string
	cols []string
	rows [][]any
	full *sql.Stmt // the prepared batchRows-row INSERT of the current transaction
}

// writer streams rows into the store: multi-row prepared INSERTs inside
// transactions of bounded size, all on one pinned connection.
type writer struct {
	ctx    context.Context
	conn   *sql.Conn
	d      dialect.Dialect
	tx     *sql.Tx
	tables []*table
	// since the last commit
	pendingRows  int
	pendingBytes int64
	onCommit     func()
}

func (w *writer) table(name string, cols ...string) *table {
	t := &table{name: name, cols: cols}
	w.tables = append(w.tables, t)
	return t
}

func (w *writer) begin() error {
	tx, err := w.conn.BeginTx(w.ctx, nil)
	if err != nil {
		return fmt.Errorf("gen: begin: %w", err)
	}
	w.tx = tx
	return nil
}

func insertSQL(d dialect.Dialect, t *table, n int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "INSERT INTO %s (%s) VALUES ", t.name, strings.Join(t.cols, ", "))
	p := 0
	for r := 0; r < n; r++ {
		if r > 0 {
			b.WriteString(", ")
		}
		b.WriteByte('(')
		for c := range t.cols {
			if c > 0 {
				b.WriteString(", ")
			}
			p++
			b.WriteString(d.Param(p))
		}
		b.WriteByte(')')
	}
	return b.String()
}

// add buffers one row, flushing the table's batch when it is full.
func (w *writer) add(t *table, size int, vals ...any) error {
	t.rows = append(t.rows, vals)
	w.pendingRows++
	w.pendingBytes += int64(size)
	if len(t.rows) >= batchRows {
		return w.flush(t)
	}
	return nil
}

// exec runs one single-row statement immediately (parents of batched rows).
func (w *writer) exec(query string, args ...any) error {
	if _, err := w.tx.ExecContext(w.ctx, w.d.Rebind(query), args...); err != nil {
		return fmt.Errorf("gen: %.40s…: %w", query, err)
	}
	return nil
}

func (w *writer) flush(t *table) error {
	if len(t.rows) == 0 {
		return nil
	}
	args := make([]any, 0, len(t.rows)*len(t.cols))
	for _, r := range t.rows {
		args = append(args, r...)
	}
	var err error
	if len(t.rows) == batchRows {
		if t.full == nil {
			if t.full, err = w.tx.PrepareContext(w.ctx, insertSQL(w.d, t, batchRows)); err != nil {
				return fmt.Errorf("gen: prepare %s: %w", t.name, err)
			}
		}
		_, err = t.full.ExecContext(w.ctx, args...)
	} else {
		_, err = w.tx.ExecContext(w.ctx, insertSQL(w.d, t, len(t.rows)), args...)
	}
	if err != nil {
		return fmt.Errorf("gen: insert into %s: %w", t.name, err)
	}
	t.rows = t.rows[:0]
	return nil
}

// maybeCommit commits when the transaction has reached its bound.
func (w *writer) maybeCommit() error {
	if w.pendingRows < commitEveryRows && w.pendingBytes < commitEveryBytes {
		return nil
	}
	return w.commit(true)
}

// commit flushes every table in declaration order (parents first) and
// commits; with reopen it begins the next transaction.
func (w *writer) commit(reopen bool) error {
	for _, t := range w.tables {
		if err := w.flush(t); err != nil {
			return err
		}
		if t.full != nil {
			t.full.Close()
			t.full = nil
		}
	}
	if err := w.tx.Commit(); err != nil {
		return fmt.Errorf("gen: commit: %w", err)
	}
	w.tx = nil
	w.pendingRows, w.pendingBytes = 0, 0
	if w.onCommit != nil {
		w.onCommit()
	}
	if reopen {
		return w.begin()
	}
	return nil
}

func (w *writer) rollback() {
	for _, t := range w.tables {
		if t.full != nil {
			t.full.Close()
			t.full = nil
		}
	}
	if w.tx != nil {
		_ = w.tx.Rollback()
		w.tx = nil
	}
}
