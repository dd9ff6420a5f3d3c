package cache

import (
	"maps"
	"slices"
	"strings"

	"go-micro.dev/v4/registry"
)

// Services returns a page of the cache's per-service view, for status
// pages: the services whose names start with prefix and sort after after,
// in name order, at most limit of them (all if limit ≤ 0). Unlike
// Stats.Services, it includes the services the cache holds no data for (a
// cold lookup that failed or was throttled, a service the registry does
// not know), and each row lists its nodes.
//
// The names are picked without the lock, and the rows are read a chunk of
// entries at a time, as Stats reads them, so that a page of a cache of
// 100 000 services never holds up lookups for long.
func (c *cache) Services(prefix, after string, limit int) []ServiceStats {
	var picked []*entry
	c.entries.Range(func(k, v any) bool {
		if name := k.(string); name > after && strings.HasPrefix(name, prefix) {
			picked = append(picked, v.(*entry))
		}
		return true
	})
	slices.SortFunc(picked, func(a, b *entry) int { return strings.Compare(a.name, b.name) })
	if limit > 0 && len(picked) > limit {
		picked = picked[:limit]
	}
	rows := make([]ServiceStats, 0, len(picked))
	snaps := make([]*snapshot, 0, len(picked))
	now := c.now()
	for len(picked) > 0 {
		chunk := picked[:min(len(picked), scanChunk)]
		picked = picked[len(chunk):]
		c.mu.Lock()
		for _, e := range chunk {
			if e.gone {
				continue
			}
			snap := e.data.Load()
			rows = append(rows, c.rowLocked(e, snap, now))
			snaps = append(snaps, snap)
		}
		c.mu.Unlock()
	}
	// Snapshots are immutable: their nodes are listed without the lock.
	for i, snap := range snaps {
		if snap != nil {
			rows[i].NodeList = nodeList(snap.services)
		}
	}
	return rows
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
