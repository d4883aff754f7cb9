package proctest

import (
	"os"
	"syscall"
)

// PeakRSS is the peak resident set size, in bytes, of the ended process
// whose state is st (Linux reports it in KiB); ok is false when st carries
// no resource usage.
func PeakRSS(st *os.ProcessState) (peak int64, ok bool) {
	ru, ok := st.SysUsage().(*syscall.Rusage)
	if !ok {
		return 0, false
	}
	return ru.Maxrss * 1024, true
}
