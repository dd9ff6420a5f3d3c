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

	"github.com/regcache/cache/internal/svcdata"
)

const (
	// SnapshotMaxAge is the age beyond which snapshot data is not loaded:
	// addresses older than a day are more likely to mislead than to help
	// a process that starts during a registry outage. It applies to the
	// file, by the time it was written, and to each service in it, by the
	// time its data was last refreshed from the registry.
	SnapshotMaxAge = 24 * time.Hour

	// SnapshotInterval is the least time between two writes of the
	// snapshot file.
	SnapshotInterval = 30 * time.Second

	// snapshotClockSkew is how far in the future a time in the file may
	// lie, for clocks that disagree a little or were stepped back: such a
	// time is read as now. Further in the future, nothing tells how old
	// the data is, so it is not loaded.
	snapshotClockSkew = 5 * time.Minute

	// snapshotFormat and snapshotVersion mark a file as ours, so that a
	// foreign JSON file is ignored rather than half read.
	snapshotFormat  = "regcache-snapshot"
	snapshotVersion = 1
	// snapshotMaxSize bounds the bytes the loader reads; persist_scan.go
	// bounds what they decode to.
	snapshotMaxSize = 64 << 20
	// snapshotMaxLinks bounds the symbolic links followed from the path.
	snapshotMaxLinks = 40
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

// parseSnapshot validates a snapshot file and returns its usable services,
// and how many it skipped because their data was older than
// SnapshotMaxAge or dated in the future. It never panics, whatever data
// holds.
func parseSnapshot(data []byte, now time.Time) (_ []loaded, skipped int, _ error) {
	var f snapshotFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, 0, fmt.Errorf("not a readable snapshot: %w", err)
	}
	if f.Format != snapshotFormat || f.Version != snapshotVersion {
		return nil, 0, fmt.Errorf("not a regcache snapshot (format %q, version %d)", f.Format, f.Version)
	}
	if ahead := f.Written.Sub(now); ahead > snapshotClockSkew {
		return nil, 0, fmt.Errorf("written %v in the future, beyond the %v allowed for clock skew",
			ahead.Round(time.Second), snapshotClockSkew)
	}
	if age := now.Sub(f.Written); age > SnapshotMaxAge {
		return nil, 0, fmt.Errorf("written %v ago, over the %v limit", age.Round(time.Second), SnapshotMaxAge)
	}
	var out []loaded
	seen := map[string]bool{}
	for _, e := range f.Services {
		if e.Name == "" || seen[e.Name] || e.Refreshed.IsZero() {
			continue
		}
		// A service read back and written again keeps its refresh
		// time, so a file rewritten every minute can still hold data a
		// month old: each service's age is checked, not only the file's.
		refreshed := e.Refreshed
		if refreshed.Sub(now) > snapshotClockSkew || now.Sub(refreshed) > SnapshotMaxAge {
			skipped++
			continue
		}
		if refreshed.After(now) {
			refreshed = now
		}
		svcs, err := svcdata.CloneIn(e.Services)
		if err != nil || !svcdata.HasNodes(svcs) {
			continue
		}
		seen[e.Name] = true
		out = append(out, loaded{name: e.Name, services: svcs, refreshed: refreshed})
	}
	return out, skipped, nil
}

// readSnapshot reads, checks and parses the snapshot file at path.
func readSnapshot(path string, now time.Time) ([]loaded, int, error) {
	target, err := resolveSnapshotPath(path)
	if err != nil {
		return nil, 0, err
	}
	f, err := openSnapshot(target)
	if err != nil {
		if target != path && !errors.Is(err, os.ErrNotExist) {
			err = fmt.Errorf("%s: %w", target, err)
		}
		return nil, 0, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, 0, err
	}
	if info.Size() > snapshotMaxSize {
		return nil, 0, fmt.Errorf("larger than %d bytes", snapshotMaxSize)
	}
	// Read into a buffer of the file's size, not one that doubles as it
	// fills. The cache replaces the file by renaming, so the file opened
	// does not change; one that does is refused.
	data := make([]byte, info.Size())
	if _, err := io.ReadFull(f, data); err != nil {
		return nil, 0, err
	}
	if n, _ := f.Read(make([]byte, 1)); n > 0 {
		return nil, 0, errors.New("the file grew while it was read")
	}
	if err := scanSnapshot(data); err != nil {
		return nil, 0, fmt.Errorf("too large to load: %w", err)
	}
	return parseSnapshot(data, now)
}

// resolveSnapshotPath follows the symbolic links at path, so that the file
// they lead to is read and replaced while the links stay: a link into a
// mounted volume keeps pointing at the data. A link must be owned by the
// process's user or root, or a link planted by another user could make
// the cache overwrite a file of its user's. A link to nothing resolves to
// the path it names, which the first write creates.
func resolveSnapshotPath(path string) (string, error) {
	for i := 0; i < snapshotMaxLinks; i++ {
		info, err := os.Lstat(path)
		if errors.Is(err, os.ErrNotExist) || err == nil && info.Mode()&os.ModeSymlink == 0 {
			return path, nil
		}
		if err != nil {
			return "", err
		}
		if err := trustLink(info); err != nil {
			return "", fmt.Errorf("%s: %w", path, err)
		}
		target, err := os.Readlink(path)
		if err != nil {
			return "", err
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(path), target)
		}
		path = target
	}
	return "", fmt.Errorf("more than %d symbolic links", snapshotMaxLinks)
}

// loadSnapshot fills the cache from its snapshot file, as stale data with
// its recorded age, so that a process that restarts during a registry
// outage can resolve what it knew. A missing, unreadable, untrusted or
// foreign file is logged once and ignored.
func (c *cache) loadSnapshot() {
	path := c.opts.SnapshotPath
	entries, skipped, err := readSnapshot(path, c.now())
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
		e := c.entryLocked(l.name)
		s := &svcdata.Snapshot{Services: l.services, Refreshed: l.refreshed, Source: svcdata.FromSnapshot}
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
	if err := probeSnapshotPath(c.opts.SnapshotPath); err != nil {
		c.writeErr = err
		c.logf(log.WarnLevel, "regcache: WithSnapshot: cannot write the snapshot %s: %v; "+
			"the cache's data is not saved until it can be", c.opts.SnapshotPath, err)
	}
}

// probeSnapshotPath creates and removes a file next to path, as a write
// of the snapshot would.
func probeSnapshotPath(path string) error {
	path, err := resolveSnapshotPath(path)
	if err != nil {
		return err
	}
	if info, err := os.Stat(path); err == nil && info.IsDir() {
		return fmt.Errorf("%s is a folder, not a file", path)
	}
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	info, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if !info.IsDir() {
		return fmt.Errorf("%s is not a folder", dir)
	}
	f, err := os.CreateTemp(dir, base+".check-*")
	if err != nil {
		return err
	}
	f.Close()
	return os.Remove(f.Name())
}

// snapshotLocked collects what a write of the file needs. The snapshots
// are immutable, so encoding them after mu is released is safe.
func (c *cache) snapshotLocked(now time.Time) *snapshotFile {
	f := &snapshotFile{Format: snapshotFormat, Version: snapshotVersion, Written: now}
	c.entries.Range(func(k, v any) bool {
		if s := v.(*entry).data.Load(); s != nil {
			f.Services = append(f.Services, snapshotEntry{Name: k.(string), Refreshed: s.ConfirmedAt(), Services: s.Services})
		}
		return true
	})
	sort.Slice(f.Services, func(i, j int) bool { return f.Services[i].Name < f.Services[j].Name })
	return f
}

// writeSnapshot replaces the file atomically: a temporary file in the same
// folder, written, synced and renamed over it, so that a reader (or
// another cache writing the same path) never sees a partial file. The mode
// is 0600 because the file lists the addresses of every service. A
// symbolic link at path is followed, and the file it leads to is replaced.
func writeSnapshot(path string, f *snapshotFile) (err error) {
	data, err := json.Marshal(f)
	if err != nil {
		return err
	}
	if path, err = resolveSnapshotPath(path); err != nil {
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
		c.logf(log.WarnLevel, "regcache: writing snapshot %s: %v", c.opts.SnapshotPath, err)
	case err == nil && failing:
		c.logf(log.InfoLevel, "regcache: writing snapshot %s works again", c.opts.SnapshotPath)
	}
}
