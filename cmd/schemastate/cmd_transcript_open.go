package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/schemastate/schemastate/transcript"
)

// openLifecycle opens --db when it is set (nil when it is not) and checks,
// before anything is read or written, that it holds background_agent_log; an
// error names the database.
func openLifecycle(ctx context.Context, e *env, dsn string, mode openMode) (*transcript.Lifecycle, func(), bool) {
	if dsn == "" {
		return nil, func() {}, true
	}
	db, target, ok := open(ctx, e, dsn, mode)
	if !ok {
		return nil, nil, false
	}
	l, err := transcript.NewLifecycle(db)
	if err == nil {
		err = l.Check(ctx)
	}
	if err != nil {
		db.Close()
		fmt.Fprintf(e.stderr, "schemastate: %s: %v\n", target.Display, err)
		return nil, nil, false
	}
	return l, func() { db.Close() }, true
}

// withLifecycle runs f with the lifecycle --db names (openLifecycle: nil
// without --db) once root is known to be a directory (rootExists), and closes
// the database afterwards. Its exit code is f's, or exitUsage when either
// check fails.
func withLifecycle(ctx context.Context, e *env, dsn string, mode openMode, root string, f func(*transcript.Lifecycle) int) int {
	l, closeDB, ok := openLifecycle(ctx, e, dsn, mode)
	if !ok {
		return exitUsage
	}
	defer closeDB()
	if !rootExists(e, root) {
		return exitUsage
	}
	return f(l)
}

// rootExists reports whether --root names a directory, and says so when it
// does not: a mistyped root must not read as "no transcripts".
func rootExists(e *env, root string) bool {
	fi, err := os.Stat(root) // the root is the host's to name: a link to it is followed
	switch {
	case errors.Is(err, os.ErrNotExist):
		fmt.Fprintf(e.stderr, "schemastate: --root %s: no such directory\n", root)
		return false
	case err != nil:
		fmt.Fprintf(e.stderr, "schemastate: --root %s: %v\n", root, err)
		return false
	case !fi.IsDir():
		fmt.Fprintf(e.stderr, "schemastate: --root %s: not a directory\n", root)
		return false
	}
	return true
}
