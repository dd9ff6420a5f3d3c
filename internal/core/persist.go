package core

import (
	"sort"
	"time"

	"github.com/regcache/cache/internal/snapfile"
	"github.com/regcache/cache/internal/svcdata"
)

// SnapshotInterval is the least time between two writes of the snapshot
// file.
const SnapshotInterval = 30 * time.Second

// persistState is the snapshot file's: dirty is set when what the cache
// would serve changed since lastWrite; err is the last write's failure.
type persistState struct {
	dirty     bool
	lastWrite time.Time
	err       error
}

// markDirty notes that what the cache would serve changed, so that the
// change reaches the snapshot file.
func (k *Core) markDirty() {
	if k.cfg.Persist && !k.persist.dirty {
		k.persist.dirty = true
		k.wake()
	}
}

// persistDue asks for a write of the snapshot file if one is due at now,
// and returns when the next is due (zero: none).
func (k *Core) persistDue(now time.Time) time.Time {
	if !k.persist.dirty {
		return time.Time{}
	}
	if due := k.persist.lastWrite.Add(SnapshotInterval); now.Before(due) {
		return due
	}
	k.rd.Write = k.TakeSnapshot(now)
	return time.Time{}
}

// TakeSnapshot returns what a write of the snapshot file at now holds, if
// anything changed since the last, and counts it written; nil otherwise.
func (k *Core) TakeSnapshot(now time.Time) *snapfile.File {
	if !k.persist.dirty {
		return nil
	}
	k.persist.dirty, k.persist.lastWrite = false, now
	return k.SnapshotFile(now)
}

// Dirty reports whether the data changed since the last write of the
// snapshot file, and when that was.
func (k *Core) Dirty() (dirty bool, lastWrite time.Time) {
	return k.persist.dirty, k.persist.lastWrite
}

// SnapshotFile returns what the snapshot file would hold at now. The
// snapshots are immutable, so encoding them after the lock is released is
// safe.
func (k *Core) SnapshotFile(now time.Time) *snapfile.File {
	f := snapfile.New(now)
	for _, e := range k.all {
		if s := e.Data.Load(); s != nil {
			f.Services = append(f.Services, snapfile.Entry{Name: e.Name, Refreshed: s.ConfirmedAt(), Services: s.Services})
		}
	}
	sort.Slice(f.Services, func(i, j int) bool { return f.Services[i].Name < f.Services[j].Name })
	return f
}

// Wrote records the outcome of a write of the snapshot file at path: a
// failure is logged once until a write succeeds again, and retried after
// the interval.
func (k *Core) Wrote(path string, err error) {
	failing := k.persist.err != nil
	k.persist.err = err
	if err != nil {
		k.persist.dirty = true
		k.wake()
	}
	switch {
	case err != nil && !failing:
		k.log(Warn, "regcache: writing snapshot %s: %v", path, err)
	case err == nil && failing:
		k.log(Info, "regcache: writing snapshot %s works again", path)
	}
}

// Unwritable records that New found the snapshot file's folder unwritable.
func (k *Core) Unwritable(err error) { k.persist.err = err }

// Load fills the cache with the services of a snapshot file, as stale data
// with their recorded age. The file holds what was just loaded.
func (k *Core) Load(entries []snapfile.Loaded, now time.Time) {
	for _, l := range entries {
		e := k.entry(l.Name, now)
		s := &svcdata.Snapshot{Services: l.Services, Refreshed: l.Refreshed, Source: svcdata.FromSnapshot}
		if k.cfg.LastKnownNodes {
			s.Known = s.Services
		}
		k.store(e, s, now)
	}
	k.persist.dirty = false
}
