//go:build !windows

package transcript_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/transcript"
)

// A FIFO in place of a log, or a log that is a symbolic link to /dev/zero,
// is refused at once, naming its path: before, opening the FIFO waited for a
// writer for ever and /dev/zero was read without end.
func TestTranscript_FIFOAndDeviceInPlaceOfALogAreRefused(t *testing.T) {
	s := newStore(t)
	for _, c := range []struct {
		agent, what string
		plant       func(path string) error
	}{
		{"agent-fifo", "named pipe (FIFO)", func(p string) error { return syscall.Mkfifo(p, 0o600) }},
		{"agent-zero", "symbolic link", func(p string) error { return os.Symlink("/dev/zero", p) }},
	} {
		require.NoError(t, s.Create(ctx, header("sess-dev", c.agent, transcript.KindScheduled)))
		p, err := s.PathsFor("sess-dev", c.agent)
		require.NoError(t, err)
		require.NoError(t, os.Remove(p.Log))
		require.NoError(t, c.plant(p.Log))

		done := make(chan error, 3)
		go func() {
			_, err := s.Load("sess-dev", c.agent)
			done <- err
			done <- s.Append(ctx, "sess-dev", c.agent, msg(transcript.AssistantMessage, "m"))
			_, err = transcript.LoadPath(p.Log)
			done <- err
		}()
		for range 3 {
			select {
			case err := <-done:
				require.ErrorIs(t, err, transcript.ErrNotRegular)
				require.ErrorContains(t, err, p.Log+" is a "+c.what)
			case <-time.After(10 * time.Second):
				t.Fatalf("%s: a read or write did not return", c.what)
			}
		}
		sums, err := s.List(ctx, "sess-dev")
		require.NoError(t, err)
		found := false
		for _, sum := range sums {
			if sum.AgentID == c.agent {
				found = true
				require.Contains(t, sum.Err, p.Log+" is a "+c.what)
			}
		}
		require.True(t, found)
	}
}

// Transcript directories are 0700 and files 0600 whatever the umask: with
// umask 0 they were 0755 before; with umask 0277 the modes are still the
// owner's to read and write.
func TestTranscript_DirectoriesAre0700AndFiles0600WhateverTheUmask(t *testing.T) {
	for _, mask := range []int{0, 0o277} {
		old := syscall.Umask(mask)
		s := newStore(t)
		require.NoError(t, s.Create(ctx, header("sess-perm", "agent-perm", transcript.KindScheduled)))
		require.NoError(t, s.Append(ctx, "sess-perm", "agent-perm", msg(transcript.AssistantMessage, "m")))
		require.NoError(t, s.Finish(ctx, "sess-perm", "agent-perm", transcript.End{Status: transcript.Completed}))
		syscall.Umask(old)

		p, err := s.PathsFor("sess-perm", "agent-perm")
		require.NoError(t, err)
		for _, d := range []string{s.Root(), filepath.Join(s.Root(), "background"), filepath.Dir(p.Log)} {
			fi, err := os.Stat(d)
			require.NoError(t, err)
			require.Equal(t, os.FileMode(0o700), fi.Mode().Perm(), "umask %#o: %s", mask, d)
		}
		for _, f := range []string{p.Log, p.Transcript} {
			fi, err := os.Stat(f)
			require.NoError(t, err)
			require.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "umask %#o: %s", mask, f)
		}
	}
}
