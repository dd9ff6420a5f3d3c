package cache

import (
	"errors"
	"os"

	log "go-micro.dev/v4/logger"

	"github.com/regcache/cache/internal/core"
	"github.com/regcache/cache/internal/snapfile"
)

const (
	// snapshotMaxAge is the age beyond which snapshot data is not loaded:
	// addresses older than a day are more likely to mislead than to help
	// a process that starts during a registry outage. It applies to the
	// file, by the time it was written, and to each service in it, by the
	// time its data was last refreshed from the registry.
	snapshotMaxAge = snapfile.MaxAge

	// snapshotInterval is the least time between two writes of the
	// snapshot file.
	snapshotInterval = core.SnapshotInterval
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
	c.core.Load(entries, c.now())
	c.unlock()
	if skipped > 0 {
		c.logf(log.InfoLevel, "regcache: loaded %d services from snapshot %s, as stale; "+
			"skipped %d whose data is older than %v or dated in the future", len(entries), path, skipped, snapshotMaxAge)
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
		c.mu.Lock()
		c.core.Unwritable(err)
		c.mu.Unlock()
		c.logf(log.WarnLevel, "regcache: WithSnapshot: cannot write the snapshot %s: %v; "+
			"the cache's data is not saved until it can be", c.opts.SnapshotPath, err)
	}
}

// persistNow writes the snapshot file if data changed since the last
// write: Stop's last write.
func (c *cache) persistNow() {
	c.mu.Lock()
	f := c.core.TakeSnapshot(c.now())
	c.mu.Unlock()
	if f != nil {
		c.write(f)
	}
}
