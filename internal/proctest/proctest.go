// Package proctest runs the schemastate CLI as a child process in tests: it
// builds the binary once per test binary, runs it with a stdin and arguments,
// and reports the exit code and both outputs. Buffer holds what a child
// process (or any set of goroutines) writes while the test reads it.
package proctest

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// cliPackage is the import path the binary is built from.
const cliPackage = "github.com/schemastate/schemastate/cmd/schemastate"

var (
	buildOnce sync.Once
	buildDir  string
	buildPath string
	buildErr  error
)

// Binary builds the schemastate binary once per test binary and returns its
// path, failing t when the build fails (with the compiler's output). Cleanup,
// from TestMain, removes it.
func Binary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "schemastate-bin-")
		if err != nil {
			buildErr = err
			return
		}
		buildDir, buildPath = dir, filepath.Join(dir, "schemastate")
		if out, err := exec.Command("go", "build", "-o", buildPath, cliPackage).CombinedOutput(); err != nil {
			buildErr, buildPath = err, string(out)
		}
	})
	require.NoError(t, buildErr, buildPath)
	return buildPath
}

// Cleanup removes the binary Binary built, if any: one per run of a package,
// tens of MiB each, would otherwise pile up in the temporary directory.
func Cleanup() {
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
}

// Result is how a child process ended.
type Result struct {
	Code           int
	Stdout, Stderr string
	// State is the ended process's state (its resource usage, say).
	State *os.ProcessState
}

// Run runs bin with args and stdin (none when nil) and waits for it. A
// non-zero exit is a Result, not an error: the error is only that the process
// could not be run. Run does not touch a testing.T, so goroutines may call it.
func Run(bin string, stdin []byte, args ...string) (Result, error) {
	cmd := exec.Command(bin, args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if cmd.ProcessState == nil { // it never started
		return Result{Code: -1}, err
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		err = nil
	}
	return Result{Code: cmd.ProcessState.ExitCode(), Stdout: out.String(), Stderr: errb.String(), State: cmd.ProcessState}, err
}

// Buffer is a bytes.Buffer that one or more goroutines write (a child
// process's output copiers, a logger's callers) while the test reads it.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
