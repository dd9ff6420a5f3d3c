package cache

import (
	"errors"
	"os"
	"sort"
	"time"

	log "go-micro.dev/v4/logger"

	"github.com/regcache/cache/internal/snapfile"
	"github.com/regcache/cache/internal/svcdata"
)

const (
	// SnapshotMaxAge is the age beyond which snapshot data is not loaded:
	// addresses older than a day are more likely to mislead than to help
	// a process that starts during a registry outage. It applies to the
	// file, by the time it was written, and to each service in it, by the
	// time its data was last refreshed from the registry.
	SnapshotMaxAge = snapfile.MaxAge

	// SnapshotInterval is the least time between two writes of the
	// snapshot file.
	SnapshotInterval = 30 * time.Second
)

// loadSnapshot fills the cache from its snapshot file, as stale data with
// its recorded age, so that a process that restarts during a registry
// outage can resolve what it knew. A missing, unreadable, untrusted or
// foreign file is logged once and ignored.
func (c *cache) loadSnapshot() {
	path := c.opts.SnapshotPath
	entries, skipped, err := snapfile.Read(path, c.now())
	if errors.Is(err, os.ErrNotExist) {
		c.logf(log.InfoLevel, "regcache: no snapshot at %s yet; starting empty", path)
		return
	}
	if err != nil {
		c.logf(log.WarnLevel, "regcache: ignoring snapshot %s: %v", path, err)
		return
	}
	c.mu.Lock()
	now := c.now()
	for _, l := range entries {
		e := c.entryLocked(l.Name)
		s := &svcdata.Snapshot{Services: l.Services, Refreshed: l.Refreshed, Source: svcdata.FromSnapshot}
		if c.opts.LastKnownNodes {
			s.Known = s.Services
		}
		c.storeLocked(e, s, now)
	}
	c.dirty = false // the file holds what was just loaded
	c.mu.Unlock()
	if skipped > 0 {
		c.logf(log.InfoLevel, "regcache: loaded %d services from snapshot %s, as stale; "+
			"skipped %d whose data is older than %v or dated in the future", len(entries), path, skipped, SnapshotMaxAge)
		return
	}
	c.logf(log.InfoLevel, "regcache: loaded %d services from snapshot %s, as stale", len(entries), path)
}

// checkSnapshot makes sure, at New, that the snapshot file can be written:
// its folder exists, and a file can be created there. A wrong path then
// shows at once, in the log and in Stats.SnapshotError, rather than at the
// first write or at Stop. The cache runs on without it.
func (c *cache) checkSnapshot() {
	if err := snapfile.Probe(c.opts.SnapshotPath); err != nil {
		c.writeErr = err
		c.logf(log.WarnLevel, "regcache: WithSnapshot: cannot write the snapshot %s: %v; "+
			"the cache's data is not saved until it can be", c.opts.SnapshotPath, err)
	}
}

// snapshotLocked collects what a write of the file needs. The snapshots
// are immutable, so encoding them after mu is released is safe.
func (c *cache) snapshotLocked(now time.Time) *snapfile.File {
	f := snapfile.New(now)
	c.entries.Range(func(k, v any) bool {
		if s := v.(*entry).data.Load(); s != nil {
			f.Services = append(f.Services, snapfile.Entry{Name: k.(string), Refreshed: s.ConfirmedAt(), Services: s.Services})
		}
		return true
	})
	sort.Slice(f.Services, func(i, j int) bool { return f.Services[i].Name < f.Services[j].Name })
	return f
}

// markDirtyLocked notes that what the cache would serve changed, so that
// the change reaches the snapshot file.
func (c *cache) markDirtyLocked() {
	if !c.dirty {
		c.dirty = true
		c.wake()
	}
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

	err := snapfile.Write(c.opts.SnapshotPath, f)
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
		c.logf(log.WarnLevel, "regcache: writing snapshot %s: %v", c.opts.SnapshotPath, err)
	case err == nil && failing:
		c.logf(log.InfoLevel, "regcache: writing snapshot %s works again", c.opts.SnapshotPath)
	}
}
