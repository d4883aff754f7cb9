package bench

import (
	"bufio"
	"context"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/schemastate/schemastate/internal/tool/bench/render"
	"github.com/schemastate/schemastate/reconcile"
)

// heapMetric is the bytes of live and not-yet-swept heap objects; reading
// it through runtime/metrics does not stop the world, so sampling it during
// a timed run barely disturbs the timing.
const heapMetric = "/memory/classes/heap/objects:bytes"

const samplePeriod = 5 * time.Millisecond

// sampled runs fn and returns its wall time; when sample is set it also
// records the Go heap's peak, sampled every few milliseconds, and the
// process's peak RSS over fn alone (Linux: VmHWM after resetting it through
// /proc/self/clear_refs).
func (b *bench) sampled(sample bool, fn func()) (time.Duration, *render.Memory) {
	if !sample {
		t0 := time.Now()
		fn()
		return time.Since(t0), nil
	}
	runtime.GC()
	resetPeakRSS()
	m := &render.Memory{RSSBefore: procStatus("VmRSS"), SamplesPeriod: samplePeriod.String()}
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		s := []metrics.Sample{{Name: heapMetric}}
		t := time.NewTicker(samplePeriod)
		defer t.Stop()
		for {
			metrics.Read(s)
			if s[0].Value.Kind() == metrics.KindUint64 {
				m.HeapPeak = max(m.HeapPeak, s[0].Value.Uint64())
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	t0 := time.Now()
	fn()
	el := time.Since(t0)
	close(done)
	wg.Wait()
	m.RSSPeak = procStatus("VmHWM")
	return el, m
}

// sampledRuns is what the side of a measurement that reconciles in process
// keeps across its runs: the bench, the context, the size it measures at,
// and the memory its first run sampled (sampledReconcile).
type sampledRuns struct {
	b   *bench
	ctx context.Context
	n   int
	mem *render.Memory
}

// keepMemory records the memory the first run sampled, if it did.
func (s *sampledRuns) keepMemory(rep *render.Report) {
	if s.mem != nil {
		rep.Memory = append(rep.Memory, *s.mem)
	}
}

// sampledReconcile is one in-process Reconcile of run with the quiet logger
// and opts, timed by sampled: on the first run (0) its memory is sampled
// too, labelled with the family, n and operation it measures, and kept in
// *mem.
func (b *bench) sampledReconcile(ctx context.Context, run int, mem **render.Memory, family string, n int, operation string, opts ...reconcile.Option) (time.Duration, *reconcile.Report, error) {
	var r *reconcile.Report
	var err error
	el, sample := b.sampled(run == 0, func() {
		r, err = reconcile.Reconcile(ctx, b.db, append([]reconcile.Option{reconcile.WithLogger(b.quiet)}, opts...)...)
	})
	if err != nil {
		return 0, nil, err
	}
	if sample != nil {
		sample.Family, sample.N, sample.Operation = family, n, operation
		*mem = sample
	}
	return el, r, nil
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
