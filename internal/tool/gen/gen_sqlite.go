package gen

import (
	"context"
	"database/sql"
	"fmt"
)

// sqliteStore: a large page cache and no fsync per commit while writing (a
// generated store is rebuilt, not recovered), the WAL folded back into the
// file afterwards, the size the database's pages.
var sqliteStore = storeSQL{
	tune:   tuneSQLite,
	finish: "PRAGMA wal_checkpoint(TRUNCATE)",
	bytes:  `SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()`,
}

// tuneSQLite sets the bulk-writing pragmas; the pinned connection goes back
// to the pool with the settings it came with.
func tuneSQLite(ctx context.Context, conn *sql.Conn) (func(), error) {
	var cache, sync int64
	if err := conn.QueryRowContext(ctx, "PRAGMA cache_size").Scan(&cache); err != nil {
		return nil, err
	}
	if err := conn.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&sync); err != nil {
		return nil, err
	}
	for _, s := range []string{"PRAGMA cache_size = -131072", "PRAGMA synchronous = OFF"} {
		if _, err := conn.ExecContext(ctx, s); err != nil {
			return nil, err
		}
	}
	return func() {
		_, _ = conn.ExecContext(context.Background(), fmt.Sprintf("PRAGMA cache_size = %d", cache))
		_, _ = conn.ExecContext(context.Background(), fmt.Sprintf("PRAGMA synchronous = %d", sync))
	}, nil
}
