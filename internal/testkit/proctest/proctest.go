// Package proctest runs the schemastate CLI as a child process in tests: it
// builds the binary once per test binary, runs it with a stdin and arguments,
// and reports the exit code and both outputs. Buffer holds what a child
// process (or any set of goroutines) writes while the test reads it. A test
// of a child's memory takes its input size from SizeMB and its measure from
// PeakRSS.
package proctest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// cliPackage is the import path the binary is built from.
const cliPackage = "github.com/schemastate/schemastate/cmd/schemastate"

// build is one build of the binary, made at most once per test binary.
type build struct {
	once      sync.Once
	dir, path string
	err       error
}

// builds holds a build per set of build tags ("" for none).
var (
	buildsMu sync.Mutex
	builds   = map[string]*build{}
)

// Binary builds the schemastate binary once per test binary and returns its
// path, failing t when the build fails (with the compiler's output). Cleanup,
// from TestMain, removes it.
func Binary(t testing.TB) string {
	t.Helper()
	return BinaryWithTags(t)
}

// BinaryWithTags is Binary built with the given build tags (such as
// schemastate_testhooks, for a binary with failpoints): each set of tags is
// built once per test binary, and Cleanup removes every one.
func BinaryWithTags(t testing.TB, tags ...string) string {
	t.Helper()
	key := strings.Join(tags, ",")
	buildsMu.Lock()
	b := builds[key]
	if b == nil {
		b = &build{}
		builds[key] = b
	}
	buildsMu.Unlock()
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", "schemastate-bin-")
		if err != nil {
			b.err = err
			return
		}
		b.dir, b.path = dir, filepath.Join(dir, "schemastate")
		args := []string{"build"}
		if key != "" {
			args = append(args, "-tags", key)
		}
		if out, err := exec.Command("go", append(args, "-o", b.path, cliPackage)...).CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go %s: %w: %s", strings.Join(args, " "), err, out)
		}
	})
	require.NoError(t, b.err)
	return b.path
}

// Cleanup removes every binary Binary and BinaryWithTags built: one per run
// of a package, tens of MiB each, would otherwise pile up in the temporary
// directory.
func Cleanup() {
	buildsMu.Lock()
	defer buildsMu.Unlock()
	for _, b := range builds {
		if b.dir != "" {
			os.RemoveAll(b.dir)
		}
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

// SizeMB is the size, in MiB, of the input a memory test feeds the child:
// def, or the value of the environment variable env when it is set (so a
// longer run can measure the sizes a report quotes).
func SizeMB(t testing.TB, env string, def int) int {
	t.Helper()
	v := os.Getenv(env)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	require.NoError(t, err, env)
	return n
}
