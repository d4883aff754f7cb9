package bench

import (
	"bytes"
	"fmt"
	"os/exec"
	"time"
)

// cli runs the schemastate binary with args as a child process and returns
// its wall time, process start included. Exit codes other than 0 are
// accepted only where they are a verdict (health's unhealthy, 1).
func (b *bench) cli(args ...string) (time.Duration, error) {
	cmd := exec.Command(b.cfg.Exe, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	t0 := time.Now()
	err := cmd.Run()
	el := time.Since(t0)
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok && len(args) > 0 && args[0] == "health" && ee.ExitCode() == 1 {
			return el, nil
		}
		return 0, fmt.Errorf("schemastate %s: %w: %s", args[0], err, stderr.String())
	}
	return el, nil
}
