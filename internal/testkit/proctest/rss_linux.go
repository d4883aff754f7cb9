package proctest

import (
	"fmt"
	"os"
	"runtime/debug"
	"syscall"
)

// PeakRSS is the peak resident set size, in bytes, of the ended process
// whose state is st (Linux reports it in KiB); ok is false when st carries
// no resource usage. Call ResetPeak right before starting the process: the
// peak Linux reports for a child is never below the peak of the test
// process that started it.
func PeakRSS(st *os.ProcessState) (peak int64, ok bool) {
	ru, ok := st.SysUsage().(*syscall.Rusage)
	if !ok {
		return 0, false
	}
	return ru.Maxrss * 1024, true
}

// ResetPeak readies this process to start a child whose peak RSS is read
// (PeakRSS). Go starts a child with vfork, which shares this process's
// memory until the exec, and at the exec Linux takes the peak of the memory
// it leaves into the child's: without this, a child's peak is the test
// process's own whenever that is the larger (a child of /bin/true read as
// 202 MiB beside a parent that had held 200). ResetPeak returns the heap's
// free pages to the system and resets this process's peak to its current
// RSS (/proc/self/clear_refs, 5), so a child's reported peak is its own
// wherever it is above that floor, which it returns.
func ResetPeak() (floor int64, err error) {
	debug.FreeOSMemory()
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		return 0, fmt.Errorf("reset this process's peak RSS: %w", err)
	}
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0, fmt.Errorf("read this process's RSS: %w", err)
	}
	var size, resident int64
	if _, err := fmt.Sscan(string(b), &size, &resident); err != nil {
		return 0, fmt.Errorf("read this process's RSS from /proc/self/statm: %w", err)
	}
	return resident * int64(os.Getpagesize()), nil
}
