package backfill_test

import (
	"os"
	"strconv"
	"strings"
	"time"
)

// watchPeak polls the peak RSS (VmHWM) of the process pid until it has
// exited, and returns the last value read. The child's rusage is no
// measure here: its peak counts the parent's (this test's, which stored
// the document through an in-process SQLite) until it execs.
func watchPeak(pid int) int64 {
	var last int64
	for {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
		if err != nil {
			return last
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
				kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
				if err == nil {
					last = kb * 1024
				}
			}
		}
		if !strings.Contains(string(b), "VmHWM:") {
			return last // a zombie: its memory is gone
		}
		time.Sleep(2 * time.Millisecond)
	}
}
