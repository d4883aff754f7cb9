package capture

// UpsertSQL is the plain upsert text w sends, as its driver receives it.
func (w *Writer) UpsertSQL() string { return w.upsert }
