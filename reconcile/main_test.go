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
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/hooks"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/reconcile"
)

// Crash and concurrency tests run the reconcile in real child processes (this
// test binary re-executed) and kill them with SIGKILL at named failpoints
// (process_test.go).

// envChild tells a child process what to run, as a childRun in JSON.
const envChild = "SCHEMASTATE_TEST_CHILD"

// childRun is one child's reconcile: the database, the failpoint at which
// it announces itself and blocks until it is killed (none: it runs to the
// end), and whether it takes PostgreSQL's online phases (online).
type childRun struct {
	Driver, DSN, PauseAt string
	Online               bool
}

func TestMain(m *testing.M) {
	if c := os.Getenv(envChild); c != "" {
		os.Exit(childReconcile(c))
	}
	os.Exit(dbtest.Main(m))
}

// childReconcile is the child process: one Reconcile of the childRun in
// spec, its report as JSON on stdout.
func childReconcile(spec string) int {
	var c childRun
	if err := json.Unmarshal([]byte(spec), &c); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	db, err := sql.Open(c.Driver, c.DSN)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer db.Close()
	wrote := false
	opts := []reconcile.Option{reconcile.WithFailpoint(func(p string) error {
		if p == hooks.FailpointCopyBatch && c.Online && !wrote {
			// A host write during the copy: every row gets a new tuple (its
			// values unchanged), which the online path must carry.
			wrote = true
			if _, err := db.Exec(`UPDATE task_session_subagents SET tool_status = tool_status`); err != nil {
				return err
			}
		}
		if p == c.PauseAt {
			fmt.Printf("PAUSED %s\n", p)
			select {}
		}
		return nil
	})}
	if c.Online {
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

// driverName is the database/sql driver of dialect d.
func driverName(d dialect.Dialect) string {
	if d == dialect.Postgres {
		return "pgx"
	}
	return "sqlite"
}

// childCmd is the command of a child that runs c on db.
func childCmd(db *dbtest.DB, c childRun) *exec.Cmd {
	c.Driver, c.DSN = driverName(db.Dialect), db.DSN
	spec, err := json.Marshal(c)
	if err != nil {
		panic(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envChild+"="+string(spec))
	cmd.Stderr = os.Stderr
	return cmd
}

// killAt starts a reconciling child of c, waits until it reaches the
// failpoint c.PauseAt, and kills it with SIGKILL.
func killAt(t *testing.T, db *dbtest.DB, c childRun) {
	t.Helper()
	point := c.PauseAt
	cmd := childCmd(db, c)
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
