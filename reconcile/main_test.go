package reconcile_test

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/internal/hooks"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/reconcile"
)

// Crash and concurrency tests run the reconcile in real child processes (this
// test binary re-executed) and kill them with SIGKILL at named failpoints.

const (
	envChild   = "SCHEMASTATE_TEST_CHILD"
	envDriver  = "SCHEMASTATE_TEST_CHILD_DRIVER"
	envDSN     = "SCHEMASTATE_TEST_CHILD_DSN"
	envPauseAt = "SCHEMASTATE_TEST_CHILD_PAUSE_AT"
	// envOnline makes the child take PostgreSQL's online phases (online).
	envOnline = "SCHEMASTATE_TEST_CHILD_ONLINE"
)

func TestMain(m *testing.M) {
	if os.Getenv(envChild) == "reconcile" {
		os.Exit(childReconcile())
	}
	os.Exit(dbtest.Main(m))
}

// childReconcile is the child process: one Reconcile, its report as JSON on
// stdout. At the failpoint named by envPauseAt it announces itself and blocks
// until it is killed.
func childReconcile() int {
	db, err := sql.Open(os.Getenv(envDriver), os.Getenv(envDSN))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer db.Close()
	pause := os.Getenv(envPauseAt)
	wrote := false
	opts := []reconcile.Option{reconcile.WithFailpoint(func(p string) error {
		if p == hooks.FailpointCopyBatch && os.Getenv(envOnline) == "1" && !wrote {
			// A host write during the copy: every row gets a new tuple (its
			// values unchanged), which the online path must carry.
			wrote = true
			if _, err := db.Exec(`UPDATE task_session_subagents SET tool_status = tool_status`); err != nil {
				return err
			}
		}
		if p == pause {
			fmt.Printf("PAUSED %s\n", p)
			select {}
		}
		return nil
	})}
	if os.Getenv(envOnline) == "1" {
		opts = append(opts, online...)
	}
	rep, err := reconcile.Reconcile(context.Background(), db, opts...)
	_ = json.NewEncoder(os.Stdout).Encode(rep)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	return 0
}

func childCmd(db *dbtest.DB, pauseAt string, env ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envChild+"=reconcile", envDriver+"="+driverName(db.Dialect), envDSN+"="+db.DSN, envPauseAt+"="+pauseAt)
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = os.Stderr
	return cmd
}

// killAt starts a reconciling child, waits until it reaches the failpoint,
// and kills it with SIGKILL.
func killAt(t *testing.T, db *dbtest.DB, point string, env ...string) {
	t.Helper()
	cmd := childCmd(db, point, env...)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	line := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			if strings.HasPrefix(s.Text(), "PAUSED") {
				line <- s.Text()
				return
			}
		}
		close(line)
	}()
	select {
	case l, ok := <-line:
		require.True(t, ok, "child exited without reaching %s", point)
		require.Equal(t, "PAUSED "+point, l)
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("child never reached %s", point)
	}
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
}

// runChildren runs n reconciling children at once (childCmd, with env) and
// returns their reports: every child must exit 0 and print its report.
func runChildren(t *testing.T, db *dbtest.DB, n int, env ...string) []reconcile.Report {
	t.Helper()
	reports := make([]reconcile.Report, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			out, err := childCmd(db, "", env...).Output()
			if err == nil {
				err = json.Unmarshal(out, &reports[i])
			}
			if err != nil {
				errs[i] = fmt.Errorf("child %d: %w: %s", i, err, out)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	return reports
}
