package bench

import (
	"fmt"
	"os"
	"time"

	"github.com/schemastate/schemastate/internal/tool/bench/render"
)

// disk measures the sequential write rate of the disk the store lives on:
// cfg.DiskMB written in 1 MiB blocks to a new file next to the store, then
// fsynced, timed to the end of the fsync. It runs at the start and at the end
// of a run and before each rebuild size, whose physical limit uses the
// figure taken just before it.
func (b *bench) disk(rep *render.Report) error {
	dir := b.stores.Dir()
	if dir == "" {
		rep.Skipped = append(rep.Skipped, "disk write rate: the store's disk is not reachable from here")
		return nil
	}
	f, err := os.CreateTemp(dir, "schemastate-bench-disk-*")
	if err != nil {
		return fmt.Errorf("bench: disk probe: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	block := make([]byte, 1<<20)
	for i := range block {
		block[i] = byte(i*7 + i>>8) // not all zeros: no filesystem shortcut
	}
	t0 := time.Now()
	for i := 0; i < b.cfg.DiskMB; i++ {
		if _, err := f.Write(block); err != nil {
			return fmt.Errorf("bench: disk probe: %w", err)
		}
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("bench: disk probe: %w", err)
	}
	el := time.Since(t0)
	n := int64(b.cfg.DiskMB) << 20
	rep.Disk = append(rep.Disk, render.Disk{Path: dir, Bytes: n, Duration: el, BytesPerSec: float64(n) / el.Seconds()})
	return nil
}
