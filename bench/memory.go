package bench

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/schemastate/schemastate/reconcile"
)

// memory runs one more reconcile on the predating store (table created, full
// backfill: the heaviest boot) and records the Go heap's peak, sampled every
// few milliseconds, and the process's peak RSS over the reconcile alone
// (Linux: VmHWM after resetting it through /proc/self/clear_refs). Not a
// timed run: sampling stops the world.
func (b *bench) memory(ctx context.Context, rep *Report) error {
	if err := b.restorePredating(ctx); err != nil {
		return err
	}
	runtime.GC()
	resetPeakRSS()
	rep.Memory.RSSBefore = procStatus("VmRSS")
	var peak uint64
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		var ms runtime.MemStats
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapInuse)
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	r, err := reconcile.Reconcile(ctx, b.db, reconcile.WithLogger(b.quiet))
	close(done)
	wg.Wait()
	if err != nil {
		return err
	}
	if s := r.Step(reconcile.StepBackfill); s == nil || s.Status != reconcile.Applied {
		return fmt.Errorf("%w: the memory run's backfill did not run", errUnexpected)
	}
	rep.Memory.HeapInusePeak = peak
	rep.Memory.RSSPeak = procStatus("VmHWM")
	return nil
}

func resetPeakRSS() {
	_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
}

// procStatus reads one "kB" field of /proc/self/status in bytes (0 if absent).
func procStatus(field string) uint64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), field+":"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}
