//go:build schemastate_testhooks

package main

import (
	"context"
	"os"
	"strings"

	"github.com/schemastate/schemastate/internal/hooks"
)

// EnvTestKillAt, in a binary built with the schemastate_testhooks tag (the
// pooler tests build one; a release build has no such hook), names a
// reconcile failpoint, or a prefix of one ("phase."): the process kills
// itself (SIGKILL on Unix) the first time the reconcile reaches it, as a
// replica killed mid-upgrade would die.
const EnvTestKillAt = "SCHEMASTATE_TEST_KILL_AT"

func testHooks(ctx context.Context) context.Context {
	at := os.Getenv(EnvTestKillAt)
	if at == "" {
		return ctx
	}
	return hooks.With(ctx, hooks.Hooks{Failpoint: func(point string) error {
		if strings.HasPrefix(point, at) {
			if p, err := os.FindProcess(os.Getpid()); err == nil {
				_ = p.Kill()
				select {} // the signal ends the process
			}
		}
		return nil
	}})
}
