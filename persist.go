package cache

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"

	log "go-micro.dev/v4/logger"
	"go-micro.dev/v4/registry"
)

const (
	// SnapshotMaxAge is the age beyond which a snapshot file is ignored at
	// New: addresses older than a day are more likely to mislead than to
	// help a process that starts during a registry outage.
	SnapshotMaxAge = 24 * time.Hour

	// SnapshotInterval is the least time between two writes of the
	// snapshot file.
	SnapshotInterval = 30 * time.Second

	// snapshotFormat and snapshotVersion mark a file as ours, so that a
	// foreign JSON file is ignored rather than half read.
	snapshotFormat  = "regcache-snapshot"
	snapshotVersion = 1
	// snapshotMaxSize bounds what the loader reads.
	snapshotMaxSize = 64 << 20
)

// snapshotFile is the on-disk form of the cache's data.
type snapshotFile struct {
	Format   string          `json:"format"`
	Version  int             `json:"version"`
	Written  time.Time       `json:"written"`
	Services []snapshotEntry `json:"services"`
}

type snapshotEntry struct {
	Name      string              `json:"name"`
	Refreshed time.Time           `json:"refreshed"`
	Services  []*registry.Service `json:"services"`
}

// loaded is one service read back from a snapshot file.
type loaded struct {
	name      string
	services  []*registry.Service
	refreshed time.Time
}

// parseSnapshot validates a snapshot file and returns its usable services.
// It never panics, whatever data holds.
func parseSnapshot(data []byte, now time.Time) ([]loaded, error) {
	var f snapshotFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("not a readable snapshot: %w", err)
	}
	if f.Format != snapshotFormat || f.Version != snapshotVersion {
		return nil, fmt.Errorf("not a regcache snapshot (format %q, version %d)", f.Format, f.Version)
	}
	if age := now.Sub(f.Written); age > SnapshotMaxAge {
		return nil, fmt.Errorf("written %v ago, over the %v limit", age.Round(time.Second), SnapshotMaxAge)
	}
	var out []loaded
	seen := map[string]bool{}
	for _, e := range f.Services {
		svcs, err := cloneIn(e.Services)
		if err != nil || e.Name == "" || seen[e.Name] || !hasNodes(svcs) || e.Refreshed.IsZero() {
			continue
		}
		seen[e.Name] = true
		refreshed := e.Refreshed
		if refreshed.After(now) {
			refreshed = now // a clock step back: treat it as new, not future
		}
		out = append(out, loaded{name: e.Name, services: svcs, refreshed: refreshed})
	}
	return out, nil
}

// loadSnapshot fills the cache from its snapshot file, as stale data with
// its recorded age, so that a process that restarts during a registry
// outage can resolve what it knew. A missing, unreadable or foreign file is
// logged once and ignored.
func (c *cache) loadSnapshot() {
	path := c.opts.SnapshotPath
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		c.opts.Logger.Logf(log.InfoLevel, "regcache: no snapshot at %s yet; starting empty", path)
		return
	}
	var data []byte
	if err == nil {
		data, err = io.ReadAll(io.LimitReader(f, snapshotMaxSize+1))
		f.Close()
	}
	if err == nil && len(data) > snapshotMaxSize {
		err = fmt.Errorf("larger than %d bytes", snapshotMaxSize)
	}
	var entries []loaded
	if err == nil {
		entries, err = parseSnapshot(data, c.now())
	}
	if err != nil {
		c.opts.Logger.Logf(log.WarnLevel, "regcache: ignoring snapshot %s: %v", path, err)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, l := range entries {
		e := c.entryLocked(l.name)
		c.storeLocked(e, &snapshot{services: l.services, refreshed: l.refreshed})
	}
	c.opts.Logger.Logf(log.InfoLevel, "regcache: loaded %d services from snapshot %s, as stale", len(entries), path)
}

// snapshotLocked collects what a write of the file needs. The snapshots
// are immutable, so encoding them after mu is released is safe.
func (c *cache) snapshotLocked(now time.Time) *snapshotFile {
	f := &snapshotFile{Format: snapshotFormat, Version: snapshotVersion, Written: now}
	c.entries.Range(func(k, v any) bool {
		if s := v.(*entry).data.Load(); s != nil {
			f.Services = append(f.Services, snapshotEntry{Name: k.(string), Refreshed: s.refreshed, Services: s.services})
		}
		return true
	})
	sort.Slice(f.Services, func(i, j int) bool { return f.Services[i].Name < f.Services[j].Name })
	return f
}

// writeSnapshot replaces the file atomically: a temporary file in the same
// folder, written, synced and renamed over it, so that a reader (or
// another cache writing the same path) never sees a partial file. The mode
// is 0600 because the file lists the addresses of every service.
func writeSnapshot(path string, f *snapshotFile) (err error) {
	data, err := json.Marshal(f)
	if err != nil {
		return err
	}
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, base+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			os.Remove(tmp.Name())
		}
	}()
	if err = tmp.Chmod(0o600); err == nil {
		if _, err = tmp.Write(data); err == nil {
			err = tmp.Sync()
		}
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	if d, derr := os.Open(dir); derr == nil {
		_ = d.Sync() // make the rename itself durable, where the OS allows
		d.Close()
	}
	return nil
}

// persist writes the snapshot file if data changed since the last write.
// It logs a failure once until a write succeeds again.
func (c *cache) persist() {
	c.mu.Lock()
	if !c.dirty {
		c.mu.Unlock()
		return
	}
	now := c.now()
	c.dirty = false
	c.lastWrite = now
	f := c.snapshotLocked(now)
	c.mu.Unlock()

	err := writeSnapshot(c.opts.SnapshotPath, f)
	c.mu.Lock()
	failing := c.writeErr != nil
	c.writeErr = err
	if err != nil {
		c.dirty = true // try again after the interval
	}
	c.mu.Unlock()
	if err != nil {
		c.wake()
	}
	switch {
	case err != nil && !failing:
		c.opts.Logger.Logf(log.WarnLevel, "regcache: writing snapshot %s: %v", c.opts.SnapshotPath, err)
	case err == nil && failing:
		c.opts.Logger.Logf(log.InfoLevel, "regcache: writing snapshot %s works again", c.opts.SnapshotPath)
	}
}
