package capture

import (
	"context"
	"database/sql"

	"github.com/schemastate/schemastate/dialect"
)

// UpsertSQL is the plain upsert text w sends, as its driver receives it.
func (w *Writer) UpsertSQL() string { return w.upsert.sql }

// NewUncheckedWriter is NewWriter without the table's check: a Writer on a
// table it would refuse, for the tests of what a write against one does.
func NewUncheckedWriter(db *sql.DB, d dialect.Dialect, opts ...Option) *Writer {
	w, err := newWriter(context.Background(), db, d, opts...)
	if err != nil {
		panic(err)
	}
	return w
}
