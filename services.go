package cache

import (
	"maps"
	"slices"
	"strings"

	"go-micro.dev/v4/registry"

	"github.com/regcache/cache/internal/core"
	"github.com/regcache/cache/internal/svcdata"
)

// Services returns a page of the cache's per-service view, for status
// pages: the services whose names start with prefix and sort after after,
// in name order, at most limit of them (all if limit ≤ 0): those held with
// data, and those held without (a cold lookup that failed or was
// throttled, a service the registry does not know), whose Source is empty.
// Each row lists its nodes.
//
// A page costs one walk of the names, without the lock, and the reading of
// its rows, a chunk of entries at a time, however fast entries come and
// go: a page of a cache of 100 000 services never holds up lookups for
// long, and always ends.
//
// The page is the services held when their names were picked. An entry
// dropped between the pick and its row (a not-found name whose retry
// window closed, an idle one evicted) keeps its row: that of the entry
// that took its name since, if any, else the entry as it stood when
// dropped. So a page has fewer than limit rows only at the end, and a
// reader paging after the last row misses no service held throughout.
// Picking again for the dropped names instead would let a page chase
// ever-new names without end.
func (c *cache) Services(prefix, after string, limit int) []ServiceStats {
	c.mu.Lock()
	hint := c.core.Len()
	c.mu.Unlock()
	return c.rowsOf(c.pick(prefix, after, limit, hint))
}

// rowsOf returns the rows of picked, in its order, with their nodes.
func (c *cache) rowsOf(picked []*core.Entry) []ServiceStats {
	rows := make([]ServiceStats, 0, len(picked))
	snaps := make([]*svcdata.Snapshot, 0, len(picked))
	now := c.now()
	c.eachPicked(picked, func(e *core.Entry, snap *svcdata.Snapshot) {
		rows = append(rows, serviceStats(c.core.Row(e, snap, now)))
		snaps = append(snaps, snap)
	})
	// Snapshots are immutable: their nodes are listed without the lock.
	for i, snap := range snaps {
		if snap != nil {
			rows[i].NodeList = nodeList(snap.Services)
		}
	}
	return rows
}

// eachPicked calls fn, with mu held, for each entry of picked, with its
// data: scanChunk entries per hold of the lock, so that lookups waiting
// for it are never held up for long. An entry dropped since the pick is
// replaced by the entry that took its name since, if any, and otherwise
// passed as it stood when dropped.
func (c *cache) eachPicked(picked []*core.Entry, fn func(e *core.Entry, snap *svcdata.Snapshot)) {
	for len(picked) > 0 {
		chunk := picked[:min(len(picked), core.ScanChunk)]
		picked = picked[len(chunk):]
		c.mu.Lock()
		for _, e := range chunk {
			e = c.core.Current(e)
			fn(e, e.Data.Load())
		}
		c.mu.Unlock()
	}
}

// pick returns the entries whose names start with prefix and sort after
// after, by name, at most limit of them (all if limit ≤ 0). It walks the
// map without the lock. With a limit it keeps only the limit smallest
// names seen so far, so that the first page of 100 000 services costs a
// walk, not a sort of them all. hint is how many entries there may be.
func (c *cache) pick(prefix, after string, limit, hint int) []*core.Entry {
	type named struct {
		name string // the entry's, kept next to it for the comparisons
		e    *core.Entry
	}
	found := make([]named, 0, max(min(limit, hint), 0))
	if limit <= 0 {
		found = make([]named, 0, hint)
	}
	cmp := func(a, b named) int { return strings.Compare(a.name, b.name) }
	c.entries.Range(func(k, v any) bool {
		n := named{k.(string), v.(*core.Entry)}
		switch {
		case n.name <= after || !strings.HasPrefix(n.name, prefix):
		case limit <= 0:
			found = append(found, n)
		case len(found) < limit || n.name < found[limit-1].name:
			i, _ := slices.BinarySearchFunc(found, n, cmp)
			if len(found) == limit {
				found = found[:limit-1]
			}
			found = slices.Insert(found, i, n)
		}
		return true
	})
	if limit <= 0 {
		slices.SortFunc(found, cmp)
	}
	out := make([]*core.Entry, len(found))
	for i, n := range found {
		out[i] = n.e
	}
	return out
}

// nodeList lists the nodes of services, each with its version and a copy
// of its metadata.
func nodeList(services []*registry.Service) []NodeStats {
	var out []NodeStats
	for _, svc := range services {
		for _, n := range svc.Nodes {
			if n == nil {
				continue
			}
			out = append(out, NodeStats{Id: n.Id, Address: n.Address, Version: svc.Version, Metadata: maps.Clone(n.Metadata)})
		}
	}
	return out
}
