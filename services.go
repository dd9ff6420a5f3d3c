package cache

import (
	"maps"
	"slices"
	"strings"

	"go-micro.dev/v4/registry"

	"github.com/regcache/cache/internal/svcdata"
)

// Services returns a page of the cache's per-service view, for status
// pages: the services whose names start with prefix and sort after after,
// in name order, at most limit of them (all if limit ≤ 0): those held with
// data, and those held without (a cold lookup that failed or was
// throttled, a service the registry does not know), whose Source is empty.
// Each row lists its nodes.
//
// The names are picked without the lock, and the rows are read a chunk of
// entries at a time, as Stats reads them, so that a page of a cache of
// 100 000 services never holds up lookups for long.
func (c *cache) Services(prefix, after string, limit int) []ServiceStats {
	c.mu.Lock()
	hint := c.count
	c.mu.Unlock()
	var rows []ServiceStats
	var snaps []*svcdata.Snapshot
	now := c.now()
	for {
		want := limit
		if limit > 0 {
			want = limit - len(rows)
		}
		picked := c.pick(prefix, after, want, hint)
		if len(picked) == 0 {
			break
		}
		after = picked[len(picked)-1].name
		full := limit > 0 && len(picked) == want
		c.eachPicked(picked, func(e *entry, snap *svcdata.Snapshot) {
			rows = append(rows, c.rowLocked(e, snap, now))
			snaps = append(snaps, snap)
		})
		// An entry dropped between the pick and its row leaves a page
		// short: pick again after the last name, or a reader paging by
		// the last row would stop before the services that follow.
		if !full || len(rows) >= limit {
			break
		}
	}
	// Snapshots are immutable: their nodes are listed without the lock.
	for i, snap := range snaps {
		if snap != nil {
			rows[i].NodeList = nodeList(snap.Services)
		}
	}
	return rows
}

// eachPicked calls fn, with mu held, for each entry of picked that is
// still held, with its data: scanChunk entries per hold of the lock, so
// that lookups waiting for it are never held up for long.
func (c *cache) eachPicked(picked []*entry, fn func(e *entry, snap *svcdata.Snapshot)) {
	for len(picked) > 0 {
		chunk := picked[:min(len(picked), scanChunk)]
		picked = picked[len(chunk):]
		c.mu.Lock()
		for _, e := range chunk {
			if !e.gone {
				fn(e, e.data.Load())
			}
		}
		c.mu.Unlock()
	}
}

// pick returns the entries whose names start with prefix and sort after
// after, by name, at most limit of them (all if limit ≤ 0). It walks the
// map without the lock. With a limit it keeps only the limit smallest
// names seen so far, so that the first page of 100 000 services costs a
// walk, not a sort of them all. hint is how many entries there may be.
func (c *cache) pick(prefix, after string, limit, hint int) []*entry {
	type named struct {
		name string // the entry's, kept next to it for the comparisons
		e    *entry
	}
	found := make([]named, 0, max(min(limit, hint), 0))
	if limit <= 0 {
		found = make([]named, 0, hint)
	}
	cmp := func(a, b named) int { return strings.Compare(a.name, b.name) }
	c.entries.Range(func(k, v any) bool {
		n := named{k.(string), v.(*entry)}
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
	out := make([]*entry, len(found))
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
